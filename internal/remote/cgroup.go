package remote

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// cgroupRoot is where the unified (v2) hierarchy is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// ExecCgroups puts each executor in a cgroup v2 of its own, under the
// server's, with memory.max set: an executor's host memory (the driver's
// included) is bounded by the kernel whatever it allocates.
type ExecCgroups struct {
	dir string // the server's cgroup, whose children the executors' are
	max int64
	n   int
}

// NewExecCgroups prepares executors' cgroups of max bytes each, or says
// why this host offers none (cgroup v1, no memory controller, not
// delegated): the server moves itself into a leaf of its cgroup, as v2
// lets only a cgroup without processes give its children controllers.
func NewExecCgroups(max int64) (*ExecCgroups, error) {
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cgroupRoot, own)
	ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil || !strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " memory ") {
		return nil, errors.New("the server's cgroup has no memory controller")
	}
	if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil && others(string(procs)) {
		return nil, errShared(own)
	}
	leaf := filepath.Join(dir, "flexgv-serve")
	if err := os.Mkdir(leaf, 0o755); err != nil && !os.IsExist(err) {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return nil, fmt.Errorf("cannot move the server into %s: %v", leaf, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0); errors.Is(err, syscall.EBUSY) {
		return nil, errShared(own) // one joined since
	} else if err != nil {
		return nil, fmt.Errorf("cannot give %s's children the memory controller: %v", dir, err)
	}
	sweepCgroups(dir)
	return &ExecCgroups{dir: dir, max: max}, nil
}

// sweepCgroups removes the executors' cgroups a server that died left
// under dir (its executors died with it: Pdeathsig). The kernel removes
// only an empty cgroup, and a live server's pid is alive.
func sweepCgroups(dir string) {
	left, _ := filepath.Glob(filepath.Join(dir, "flexgv-executor-*-*"))
	for _, d := range left {
		pid, err := strconv.Atoi(strings.Split(filepath.Base(d), "-")[2])
		if err == nil && pid > 0 && syscall.Kill(pid, 0) == syscall.ESRCH {
			os.Remove(d)
		}
	}
}

// errShared: cgroup v2 gives controllers only to the children of a cgroup
// without processes of its own, and the server's holds others.
func errShared(own string) error {
	return fmt.Errorf("its cgroup %s holds other processes than the server; run the server in a cgroup of its own "+
		"(a systemd unit, or a cgroup made for it), where it can give its executors the memory controller", own)
}

// others says whether a cgroup.procs list names another process than this.
func others(procs string) bool {
	me := strconv.Itoa(os.Getpid())
	for _, p := range strings.Fields(procs) {
		if p != me {
			return true
		}
	}
	return false
}

// ownCgroup is the server's cgroup v2 path, or why there is none.
func ownCgroup() (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	v1 := false
	var path string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			path = p
		} else {
			v1 = true
		}
	}
	if v1 || path == "" {
		return "", errors.New("this host uses cgroup v1")
	}
	return path, nil
}

// make is a new executor's cgroup, opened for clone: its descriptor and
// the function that removes it once the executor ended.
func (c *ExecCgroups) make() (*os.File, func(), error) {
	c.n++
	dir := filepath.Join(c.dir, fmt.Sprintf("flexgv-executor-%d-%d", os.Getpid(), c.n))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, nil, err
	}
	gone := func() { os.Remove(dir) }
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(c.max, 10)), 0); err != nil {
		gone()
		return nil, nil, err
	}
	f, err := os.Open(dir)
	if err != nil {
		gone()
		return nil, nil, err
	}
	return f, func() { f.Close(); gone() }, nil
}
