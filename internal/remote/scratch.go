package remote

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// scratch holds the temporary folders of one server's executors, in a
// folder of its own under base. A lock on a file in it, held for the
// server's life, tells a later server which folders were left by one that
// died (a SIGKILL leaves no time to clean up): those it removes at start.
type scratch struct {
	dir  string
	lock *os.File
}

const scratchPrefix = "flexgv-serve-"

// newScratch removes the folders of servers gone and makes this one's.
// The folder is locked before it takes its name, so no sweep sees it
// unlocked.
func newScratch(base string) (*scratch, error) {
	sweepScratch(base)
	tmp, err := os.MkdirTemp(base, ".new-"+scratchPrefix)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(tmp, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	// Executors run as another user reach their own folder inside.
	if err == nil {
		err = os.Chmod(tmp, 0o711)
	}
	dir := filepath.Join(base, strings.TrimPrefix(filepath.Base(tmp), ".new-"))
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		os.RemoveAll(tmp)
		return nil, err
	}
	return &scratch{dir: dir, lock: f}, nil
}

// sweepScratch removes the folders under base whose server no longer
// holds their lock: only real folders of this user's (another user may
// plant anything under a shared temporary folder).
func sweepScratch(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, scratchPrefix+"*"))
	for _, d := range dirs {
		var st unix.Stat_t
		if unix.Lstat(d, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() {
			continue
		}
		f, err := os.OpenFile(filepath.Join(d, ".lock"), os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			os.RemoveAll(d)
		}
		f.Close()
	}
}

// folder is a new executor's temporary folder, uid's (-1: the server's).
func (s *scratch) folder(uid, gid int) (string, error) {
	d, err := os.MkdirTemp(s.dir, "executor-")
	if err == nil && uid >= 0 {
		if err = os.Chown(d, uid, gid); err != nil {
			os.RemoveAll(d)
		}
	}
	return d, err
}

// close removes the server's folder.
func (s *scratch) close() {
	os.RemoveAll(s.dir)
	s.lock.Close()
}
