package remote

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The admin socket is how flexgv migrate reaches a running server: a unix
// socket of mode 0600 that serves only the server's user and root (by the
// peer's credentials), one JSON request line and one JSON answer line per
// connection.

// AdminVersion is the version of the admin protocol ("v").
const AdminVersion = 1

const (
	// maxAdminRequest bounds a request line.
	maxAdminRequest = 4096
	// adminReadTimeout is how long a peer has to send its request.
	adminReadTimeout = 5 * time.Second
	// MaxMigrateWait bounds how long a request may wait for answers.
	MaxMigrateWait = time.Hour
)

// AdminRequest is a request line.
type AdminRequest struct {
	V      int    `json:"v"`
	Op     string `json:"op"`
	To     string `json:"to,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	Pid    int    `json:"pid,omitempty"`
	All    bool   `json:"all,omitempty"`
	WaitMs int64  `json:"wait_ms,omitempty"`
}

// AdminAnswer is an answer line: an error, or the results.
type AdminAnswer struct {
	V       int             `json:"v"`
	Error   string          `json:"error,omitempty"`
	Results []MigrateResult `json:"results,omitempty"`
}

// AdminPath is the admin socket of a server listening on listen: flag
// (unix:///PATH, or an absolute PATH) when given, else beside a unix
// socket (PATH.admin), else in the user's runtime folder by host and port.
func AdminPath(flag string, listen Addr) (string, error) {
	path := flag
	if flag != "" {
		if strings.Contains(flag, "://") {
			a, err := ParseAddr(flag)
			if err != nil || a.Network != "unix" {
				return "", fmt.Errorf("admin socket %q: want unix:///PATH or an absolute PATH", flag)
			}
			path = a.Address
		}
		if !filepath.IsAbs(path) {
			return "", fmt.Errorf("admin socket %q: want unix:///PATH or an absolute PATH", flag)
		}
	} else if listen.Network == "unix" || listen.Network == "shm" {
		path = listen.Address + ".admin"
	} else {
		host, port, err := net.SplitHostPort(listen.Address)
		if err != nil {
			return "", fmt.Errorf("address %s: %v", listen, err)
		}
		dir := os.Getenv("XDG_RUNTIME_DIR")
		if dir != "" {
			dir = filepath.Join(dir, "flexgv")
		} else {
			dir = filepath.Join(os.TempDir(), fmt.Sprintf("flexgv-%d", os.Geteuid()))
		}
		path = filepath.Join(dir, "serve-"+host+"-"+port+".admin")
	}
	if len(path) > 107 {
		return "", fmt.Errorf("admin socket %s: longer than 107 bytes (give --admin unix:///PATH)", path)
	}
	return path, nil
}

// ListenAdmin opens the admin socket at path, making its folder (mode
// 0700) if need be; one left by a server that is gone is replaced, a live
// server's is refused. It is removed when the listener closes.
func ListenAdmin(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	// A folder another user made (/tmp/flexgv-UID) is theirs to swap the
	// socket in.
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if owner := st.Sys().(*syscall.Stat_t).Uid; owner != uint32(os.Geteuid()) && owner != 0 {
		return nil, fmt.Errorf("admin socket %s: its folder is user %d's", path, owner)
	}
	l, err := Listen(Addr{"unix", path})
	if err != nil {
		return nil, fmt.Errorf("admin socket %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	return l, nil
}

// peerUID is the user of the process at the other end of c.
func peerUID(c net.Conn) (uint32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return cred.Uid, nil
}

// ServeAdmin answers requests on the admin socket l until ctx ends, then
// closes it (removing the socket) and returns once every request is
// answered.
func (s *Server) ServeAdmin(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.Close()
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			a := s.admin(ctx, c)
			a.V = AdminVersion
			line, _ := json.Marshal(a)
			c.SetWriteDeadline(time.Now().Add(adminReadTimeout))
			c.Write(append(line, '\n'))
		}()
	}
}

// admin answers one admin connection.
func (s *Server) admin(ctx context.Context, c net.Conn) AdminAnswer {
	uid, err := peerUID(c)
	if err != nil {
		return AdminAnswer{Error: "refused: the peer's user is unknown: " + err.Error()}
	}
	if own := uint32(os.Geteuid()); uid != own && uid != 0 {
		s.limitedf(&s.adminLog, "admin socket: refused user %d (only %d and root may)", uid, own)
		return AdminAnswer{Error: fmt.Sprintf("refused: user %d is neither the server's user (%d) nor root", uid, own)}
	}
	c.SetReadDeadline(time.Now().Add(adminReadTimeout))
	line, err := bufio.NewReaderSize(c, maxAdminRequest).ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return AdminAnswer{Error: fmt.Sprintf("the request is longer than %d bytes", maxAdminRequest)}
	case errors.Is(err, io.EOF):
		return AdminAnswer{Error: "the request ended before its newline"}
	case err != nil:
		return AdminAnswer{Error: fmt.Sprintf("no request line within %v: %v", adminReadTimeout, err)}
	}
	var version struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(line, &version); err != nil {
		return AdminAnswer{Error: "the request is not a JSON object: " + err.Error()}
	}
	if version.V != AdminVersion {
		return AdminAnswer{Error: fmt.Sprintf("request version %d: this server speaks version %d", version.V, AdminVersion)}
	}
	var req AdminRequest
	d := json.NewDecoder(strings.NewReader(string(line)))
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil {
		return AdminAnswer{Error: "bad request: " + err.Error()}
	}
	switch {
	case req.Op != "migrate":
		return AdminAnswer{Error: fmt.Sprintf("unknown op %q (want migrate)", req.Op)}
	case req.WaitMs <= 0 || req.WaitMs > MaxMigrateWait.Milliseconds():
		return AdminAnswer{Error: fmt.Sprintf("wait_ms %d: want 1 to %d", req.WaitMs, MaxMigrateWait.Milliseconds())}
	}
	sel := Selection{Tenant: req.Tenant, Pid: req.Pid, All: req.All}
	s.logf("admin socket: user %d asks to move %s to %s", uid, sel, req.To)
	results, err := s.Migrate(ctx, req.To, sel, time.Duration(req.WaitMs)*time.Millisecond)
	if err != nil {
		return AdminAnswer{Error: err.Error()}
	}
	return AdminAnswer{Results: results}
}

// AdminCall sends req to the admin socket at path and reads the answer,
// waiting up to the request's wait and a margin. It trusts only a server
// of this user or root.
func AdminCall(path string, req AdminRequest) (AdminAnswer, error) {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return AdminAnswer{}, err
	}
	defer c.Close()
	uid, err := peerUID(c)
	if err != nil {
		return AdminAnswer{}, err
	}
	if own := uint32(os.Geteuid()); uid != own && uid != 0 {
		return AdminAnswer{}, fmt.Errorf("%s is served by user %d, neither this user (%d) nor root", path, uid, own)
	}
	req.V = AdminVersion
	line, err := json.Marshal(req)
	if err != nil {
		return AdminAnswer{}, err
	}
	c.SetDeadline(time.Now().Add(time.Duration(req.WaitMs)*time.Millisecond + 30*time.Second))
	// A server that refuses this user answers without reading: the
	// answer says more than the write's error.
	_, werr := c.Write(append(line, '\n'))
	// Results are bounded by the executors a server may hold.
	back, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		if werr != nil {
			err = werr
		}
		return AdminAnswer{}, fmt.Errorf("no answer from %s: %v", path, err)
	}
	var a AdminAnswer
	if err := json.Unmarshal(back, &a); err != nil {
		return AdminAnswer{}, fmt.Errorf("%s answered something unreadable: %v", path, err)
	}
	if a.V != AdminVersion {
		return AdminAnswer{}, fmt.Errorf("%s answered in version %d of the admin protocol, want %d", path, a.V, AdminVersion)
	}
	return a, nil
}
