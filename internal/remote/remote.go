// Package remote serves GPUs to programs on other machines or in other
// processes: it accepts connections from the remoting libcuda.so.1
// (remote/client) and hands each to an executor process of its own
// (remote/executor) that calls the real driver for that client alone. When
// a client goes, its executor exits and the driver frees what it held;
// when the server goes, so do its executors.
package remote

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"golang.org/x/sys/unix"
)

// Addr is where a server listens and clients connect.
type Addr struct {
	Network string // "unix", "tcp", or "tls" (TCP with TLS)
	Address string // socket path, or host:port
}

func (a Addr) String() string { return a.Network + "://" + a.Address }

// ParseAddr reads unix:///PATH, tcp://HOST:PORT or tls://HOST:PORT.
func ParseAddr(s string) (Addr, error) {
	bad := func(why string) (Addr, error) {
		return Addr{}, fmt.Errorf("address %q: %s (want unix:///PATH, shm:///PATH, tcp://HOST:PORT or tls://HOST:PORT)", s, why)
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return bad("no scheme")
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return bad("a control character")
	}
	switch scheme {
	case "unix", "shm": // shm: the unix socket, then rings in shared memory
		if !strings.HasPrefix(rest, "/") {
			return bad("the socket path must be absolute")
		}
		if len(rest) > 107 {
			return bad("the socket path is longer than 107 bytes")
		}
		return Addr{scheme, rest}, nil
	case "tcp", "tls":
		u, err := url.Parse("tcp://" + rest)
		if err != nil || u.Path != "" || u.User != nil || u.RawQuery != "" {
			return bad("not HOST:PORT")
		}
		_, port, err := net.SplitHostPort(rest)
		if err != nil {
			return bad(err.Error())
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return bad("the port must be 1 to 65535")
		}
		return Addr{scheme, rest}, nil
	}
	return bad("unknown scheme " + scheme)
}

// ParseGPUs checks a --gpus list (device indexes or UUIDs, comma-separated)
// and returns it as CUDA_VISIBLE_DEVICES takes it.
func ParseGPUs(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	seen := map[string]bool{}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if n, err := strconv.Atoi(f); err == nil && n >= 0 {
			f = strconv.Itoa(n)
		} else if !strings.HasPrefix(f, "GPU-") || len(f) < 8 {
			return "", fmt.Errorf("--gpus %q: %q is neither a device index nor a GPU-UUID", s, f)
		}
		if seen[f] {
			return "", fmt.Errorf("--gpus %q: %s is listed twice", s, f)
		}
		seen[f] = true
		out = append(out, f)
	}
	return strings.Join(out, ","), nil
}

// Built finds a file of the build layout next to the flexgv executable:
// name under ../remote/ (the build tree) or in the executable's folder.
func Built(name string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(exe)
	for _, c := range []string{filepath.Join(dir, "..", "remote", name), filepath.Join(dir, name)} {
		if _, err := os.Stat(c); err == nil {
			return filepath.Clean(c), nil
		}
	}
	return "", fmt.Errorf("cannot find %s next to %s (build it with make)", name, exe)
}

// NvidiaSmi is the remote path's nvidia-smi in the remoting folder dir
// (NVIDIA's refuses the client's NVML), or "" where dir has none.
func NvidiaSmi(dir string) string {
	p := filepath.Join(dir, "bin", "nvidia-smi")
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return p
}

// Listen opens the server's socket. A unix socket left behind by a server
// that is gone is replaced; one a live server answers on is refused.
func Listen(a Addr) (net.Listener, error) {
	if a.Network == "unix" {
		if fi, err := os.Lstat(a.Address); err == nil {
			if fi.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("%s exists and is not a socket", a.Address)
			}
			if listeningUnix(a.Address) {
				return nil, fmt.Errorf("%s: a server is already listening there", a.Address)
			}
			// Not listed (a server in another network namespace): ask it.
			if c, err := net.DialTimeout("unix", a.Address, time.Second); err == nil {
				c.Close()
				return nil, fmt.Errorf("%s: a server is already listening there", a.Address)
			}
			if err := os.Remove(a.Address); err != nil {
				return nil, err
			}
		}
	}
	network := a.Network
	if network == "tls" {
		network = "tcp"
	}
	l, err := net.Listen(network, a.Address)
	if err != nil {
		return nil, err
	}
	if ul, ok := l.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(true)
	}
	return l, nil
}

func peerName(c net.Conn) string {
	if p := c.RemoteAddr().String(); p != "" && p != "@" {
		return p
	}
	return "local"
}

// moduleCache is the folder t's executors keep module images in, made
// (mode 0700) if need be; "" when none is kept or it cannot be made (said).
func (s *Server) moduleCache(t *Tenant) string {
	if s.ModuleCache == "" {
		return ""
	}
	dir := filepath.Join(s.ModuleCache, "open")
	if t != nil {
		dir = filepath.Join(s.ModuleCache, "tenant-"+t.Name)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.logf("module images are not kept: %v", err)
		return ""
	}
	return dir
}

// cacheFor gives module image folder dir (and the images in it) to u, if
// it is another user's, and opens top, the folder above it, which u may
// search but not read, as executors find dir through it whatever they can
// reach by path (the folder is found afresh each time: one made anew, if
// it is u's, is used at once).
func cacheFor(top, dir string, u *ExecUser) (*os.File, error) {
	st, err := os.Stat(dir)
	if err == nil && st.Sys().(*syscall.Stat_t).Uid != u.Uid {
		var entries []os.DirEntry
		if entries, err = os.ReadDir(dir); err == nil {
			err = os.Lchown(dir, int(u.Uid), int(u.Gid))
			for _, e := range entries {
				if err == nil {
					err = os.Lchown(filepath.Join(dir, e.Name()), int(u.Uid), int(u.Gid))
				}
			}
		}
	}
	if err == nil {
		if st, err = os.Stat(top); err == nil && st.Mode().Perm()&0o001 == 0 {
			err = os.Chmod(top, st.Mode().Perm()|0o001)
		}
	}
	if err != nil {
		return nil, err
	}
	return os.Open(top)
}

// ExecUser is an unprivileged user executors run as.
type ExecUser struct {
	Name     string
	Uid, Gid uint32
	// Groups are its other groups: where a GPU's device nodes are
	// restricted to a group (NVreg_DeviceFileMode), its user joins it.
	Groups []uint32
}

// DefaultExecUserNames are the users executors run as when a server run
// as root is not told whom to run them as: the first that exists.
const DefaultExecUserNames = "flexgv-executor, else nobody"

// DefaultExecUser is the first of DefaultExecUserNames that exists.
func DefaultExecUser() (*ExecUser, error) {
	if _, err := user.Lookup("flexgv-executor"); err == nil {
		return LookupExecUser("flexgv-executor")
	}
	u, err := LookupExecUser("nobody")
	if err != nil {
		return nil, fmt.Errorf("neither flexgv-executor nor nobody will do (%v)", err)
	}
	return u, nil
}

// LookupExecUser finds user name (or a numeric uid), refusing root.
func LookupExecUser(name string) (*ExecUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("no user %s on this machine", name)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %s has no numeric uid and gid", name)
	}
	if uid == 0 || gid == 0 {
		return nil, fmt.Errorf("user %s is root or in its group: executors would keep its privileges", name)
	}
	e := &ExecUser{u.Username, uint32(uid), uint32(gid), []uint32{}}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("the groups of user %s: %v", name, err)
	}
	for _, id := range ids {
		g, err := strconv.ParseUint(id, 10, 32)
		switch {
		case err != nil:
			return nil, fmt.Errorf("user %s is in group %s, which has no numeric id", name, id)
		case g == 0:
			return nil, fmt.Errorf("user %s is root or in its group: executors would keep its privileges", name)
		case uint32(g) != e.Gid:
			e.Groups = append(e.Groups, uint32(g))
		}
	}
	return e, nil
}

// Server authenticates connections and hands them to executors.
type Server struct {
	Executor string   // path of flexgv-executor
	Driver   string   // CUDA driver the executors load ("" for libcuda.so.1)
	GPUs     string   // CUDA_VISIBLE_DEVICES for the executors ("" for all)
	Env      []string // the executors' environment
	// ModuleCache, when set, is where executors keep module images by
	// hash: a folder per tenant ("open" for clients without one).
	ModuleCache string
	// ModuleCacheMax: the bytes a tenant's folder keeps at most (0: the
	// executor's default, 8 GiB).
	ModuleCacheMax int64
	// PinnedMax: the bytes of pinned host memory a connection's executor
	// registers at most (-1: its default, a quarter of physical memory).
	PinnedMax int64
	Tenants   []*Tenant // who may connect; none (and no Lookup): anyone who can reach the socket
	// Lookup, when set, finds the tenant of a token hash none of Tenants
	// has (TenantDir.Lookup): nil if none; an error refuses the client.
	Lookup func(h [32]byte) (*Tenant, error)
	// TLS, when set, is spoken on every connection: the server ends it and
	// relays the calls to the executor over a socket pair.
	TLS *tls.Config
	Log io.Writer

	// MaxConnsPerTenant bounds each tenant's connections, so its
	// executors (0: DefaultMaxConnsPerTenant).
	MaxConnsPerTenant int
	// User, when set, is who the executors run as (a server run as root
	// gives them no privilege of its own); each gets a temporary folder of
	// its own, and a tenant's is given its tenant file open.
	User *ExecUser
	// Cgroups, when set, bound each executor's memory (--executor-memory).
	Cgroups *ExecCgroups

	// maxPending bounds the connections authenticating at once (0:
	// DefaultMaxPending), maxPendingNet those of one network (0:
	// maxPendingPerNet): peers that connect and say nothing cannot take
	// every descriptor for AuthTimeout.
	maxPending, maxPendingNet int
	pending                   pendingConns
	guesses                   guesses // wrong tokens per network
	now                       func() time.Time
	// lines peers can cause at will, each kind rate-limited
	closedLog, silentLog, rationLog logLimit
	controlLog                      logLimit // executors' control lines that make no sense
	adminLog                        logLimit // admin connections of other users

	mu      sync.Mutex
	execs   map[int]*executor
	conns   map[string]int  // executors per tenant, with those starting
	atCap   map[string]bool // tenants whose cap was said since they were last below it
	closing bool            // shutting down: an executor started now ends at once
	// executors awaiting their client's host-function channel, by the
	// hash of its secret
	channels map[[sha256.Size]byte]*channel
	wg       sync.WaitGroup
	scratch  *scratch // the executors' temporary folders
}

func (s *Server) logf(format string, args ...any) {
	fmt.Fprintf(s.Log, "flexgv serve: "+format+"\n", args...)
}

// Prepare makes what the server keeps on the host (its executors'
// temporary folders, those of servers that died removed), once; Serve
// does if it was not called.
func (s *Server) Prepare() error {
	if s.scratch != nil {
		return nil
	}
	var err error
	if s.scratch, err = newScratch(os.TempDir()); err != nil {
		return fmt.Errorf("a folder for the executors' temporary folders: %w", err)
	}
	return nil
}

// Serve accepts connections on l until ctx ends, then ends the executors
// it started and returns.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	if err := s.Prepare(); err != nil {
		l.Close()
		return err
	}
	defer s.scratch.close()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				s.shutdown()
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.shutdown()
			return err
		}
		max, perNet := s.maxPending, s.maxPendingNet
		if max == 0 {
			max = DefaultMaxPending
		}
		if perNet == 0 {
			perNet = maxPendingPerNet
		}
		key := netKey(c)
		pc, closed, of, held := s.pending.add(key, c, perNet, max)
		if closed != nil {
			s.limitedf(&s.closedLog, "%s: closed a connection that had not authenticated: %s holds %d of the %d that may be authenticating",
				peerName(closed.c), of, held, max)
		}
		// Authentication waits on the peer: not in the accepting loop.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.start(ctx, c, key, pc)
		}()
	}
}

// start authenticates a connection and gives it an executor of its own,
// in its tenant when the server has tenants. A refused peer never reaches
// an executor.
func (s *Server) start(ctx context.Context, c net.Conn, key string, pc *pendingConn) {
	peer := peerName(c)
	if tc, ok := c.(*net.TCPConn); ok {
		// A client whose machine or network vanished ends its executor too.
		tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 5})
		tc.SetNoDelay(true)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	t, ch, err := s.handshake(&c)
	s.pending.done(key, pc)
	if t != nil && ch == nil {
		defer s.leave(t)
	}
	if !stop() || err != nil {
		var quiet *limited
		switch {
		case err == nil || pc.closed: // said when it was closed
		case errors.As(err, &quiet):
			if quiet.log != nil {
				s.limitedf(quiet.log, "%s: refused: %v", peer, err)
			}
		default:
			s.logf("%s: refused: %v", peer, err)
		}
		c.Close()
		return
	}
	var f *os.File
	if tc, ok := c.(*tls.Conn); ok {
		f, err = s.relay(tc)
	} else {
		f, err = c.(interface{ File() (*os.File, error) }).File()
		c.Close()
	}
	if err != nil {
		s.logf("%s: %v", peer, err)
		return
	}
	defer f.Close()
	if ch != nil {
		// The executor's own thread serves it (remote/executor/hostfn.c).
		if err := unix.Sendmsg(int(ch.ctl.Fd()), []byte{'R'}, unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
			s.logf("%s: cannot hand the host-function channel to its executor: %v", peer, err)
		}
		return
	}
	ctl, err := s.newChannel(t)
	if err != nil {
		s.logf("%s: %v", peer, err)
		return
	}
	defer s.dropChannel(ctl)
	args := []string{"--fd", "3", "--peer", peer, "--hostfn-fd", "4"}
	if s.Driver != "" {
		args = append(args, "--driver", s.Driver)
	}
	files := []*os.File{f, ctl.exec}
	if dir := s.moduleCache(t); dir != "" {
		if u := s.User; u != nil {
			// Its user may not reach the folder by its path (a root
			// server's is under /root): it is given the folder above it.
			d, err := cacheFor(s.ModuleCache, dir, u)
			if err != nil {
				s.logf("%s: module images are not kept: %v", peer, err)
				return
			}
			defer d.Close()
			files = append(files, d)
			dir = fmt.Sprintf("/proc/self/fd/%d/%s", 2+len(files), filepath.Base(dir))
		}
		args = append(args, "--module-cache", dir)
		if s.ModuleCacheMax > 0 {
			args = append(args, "--module-cache-max", strconv.FormatInt(s.ModuleCacheMax, 10))
		}
	}
	if s.PinnedMax >= 0 {
		args = append(args, "--pinned-max", strconv.FormatInt(s.PinnedMax, 10))
	}
	// How the executor is asked to move its program (migrate.go).
	ours, theirs, err := newControl()
	if err != nil {
		s.logf("%s: %v", peer, err)
		return
	}
	defer ours.Close()
	defer theirs.Close()
	files = append(files, theirs)
	args = append(args, "--control-fd", strconv.Itoa(2+len(files)))
	cmd := exec.Command(s.Executor, args...)
	cmd.ExtraFiles = files
	cmd.Env = slices.Clone(s.Env)
	// Executors never gain privileges (no setuid), have bounded processes
	// and files (the executor sets both), and a temporary folder of their own.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	uid, gid := -1, -1
	if u := s.User; u != nil && !t.mps() {
		uid, gid = int(u.Uid), int(u.Gid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.Uid, Gid: u.Gid, Groups: u.Groups}
		// The tenant's file is the node's, not the executor user's: the
		// shim is given it open (to map, and to lock its slot). Without
		// it, the shim refuses CUDA and says why.
		if given, err := t.openFile(); err != nil {
			s.logf("%s: tenant %s: %v", peer, t.Name, err)
		} else if given != nil {
			for _, g := range given {
				defer g.Close()
			}
			cmd.ExtraFiles = append(cmd.ExtraFiles, given...)
			n := 2 + len(cmd.ExtraFiles)
			cmd.Env = append(cmd.Env, fmt.Sprintf("FLEXGV_TENANT_FDS=%d,%d", n-1, n))
		}
	}
	tmp, err := s.scratch.folder(uid, gid)
	if err != nil {
		s.logf("%s: no temporary folder for the executor: %v", peer, err)
		return
	}
	defer os.RemoveAll(tmp)
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	cgDone := func() {}
	if s.Cgroups != nil {
		s.mu.Lock()
		cg, done, err := s.Cgroups.make()
		s.mu.Unlock()
		if err != nil {
			s.logf("%s: no cgroup for the executor: %v", peer, err)
			return
		}
		defer done()
		cgDone = done
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	if s.GPUs != "" {
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+s.GPUs)
	}
	who := peer
	if t != nil {
		cmd.Env = append(cmd.Env, t.Env...)
		who += " (tenant " + t.Name + ")"
	}
	cmd.Stdout, cmd.Stderr = s.Log, s.Log
	// Executors do not outlive the server, even one killed with SIGKILL
	// (Pdeathsig above).
	err = cmd.Start()
	ctl.exec.Close()
	theirs.Close()
	if err != nil {
		s.logf("%s: cannot start the executor: %v", peer, err)
		return
	}
	pid := cmd.Process.Pid
	s.logf("%s connected: executor pid %d", who, pid)
	e := &executor{pid: pid, peer: peer, proc: cmd.Process, ctl: ours, ended: make(chan struct{})}
	if t != nil {
		e.tenant = t.Name
	}
	go s.readControl(e) // ended before start returns
	s.mu.Lock()
	if s.execs == nil {
		s.execs = map[int]*executor{}
	}
	s.execs[pid] = e
	if s.closing {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	s.mu.Unlock()
	err = cmd.Wait()
	s.mu.Lock()
	delete(s.execs, pid)
	s.mu.Unlock()
	// What it wrote before it ended is read; a child of its that keeps
	// the socket open does not hold the reader.
	ours.SetReadDeadline(time.Now().Add(time.Second))
	<-e.ended
	how := "exited"
	if err != nil {
		how = err.Error()
	}
	// Its folder and cgroup go before it is said to have ended: who reads
	// that finds nothing of it left (the deferred removals came after).
	os.RemoveAll(tmp)
	cgDone()
	s.logf("%s: executor pid %d ended (%s)", who, pid, how)
}

// handshake authenticates c, in TLS when the server speaks it (then *c
// becomes the TLS connection).
func (s *Server) handshake(c *net.Conn) (*Tenant, *channel, error) {
	if s.TLS == nil {
		return s.authenticate(*c)
	}
	tc := tls.Server(*c, s.TLS)
	*c = tc
	tc.SetDeadline(time.Now().Add(AuthTimeout))
	if err := tc.Handshake(); err != nil {
		return nil, nil, &limited{&s.silentLog, fmt.Errorf("TLS handshake: %w", err)}
	}
	return s.authenticate(tc)
}

// A channel is how a client's host-function channel (a second connection,
// remote/client/hostfn.c) reaches its executor: a socket pair whose one
// end the executor is given (exec) and reads the secret from, then the
// channel's descriptor; the server keeps the other (ctl) until the
// executor ends. Only the connection's client has the secret (its
// executor's handshake gives it), and it is taken once.
type channel struct {
	ctl, exec *os.File
	tenant    string
	hash      [sha256.Size]byte
}

func (s *Server) newChannel(t *Tenant) (*channel, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket pair for the executor: %w", err)
	}
	ch := &channel{ctl: os.NewFile(uintptr(fds[0]), "channel"), exec: os.NewFile(uintptr(fds[1]), "channel")}
	if t != nil {
		ch.tenant = t.Name
	}
	secret := make([]byte, SecretLen)
	if _, err := rand.Read(secret); err != nil {
		ch.ctl.Close()
		ch.exec.Close()
		return nil, fmt.Errorf("no secret for the executor: %w", err)
	}
	ch.hash = sha256.Sum256(secret)
	if _, err := ch.ctl.Write(secret); err != nil {
		ch.ctl.Close()
		ch.exec.Close()
		return nil, fmt.Errorf("socket pair for the executor: %w", err)
	}
	s.mu.Lock()
	if s.channels == nil {
		s.channels = map[[sha256.Size]byte]*channel{}
	}
	s.channels[ch.hash] = ch
	s.mu.Unlock()
	return ch, nil
}

// dropChannel forgets ch once its executor ended.
func (s *Server) dropChannel(ch *channel) {
	s.mu.Lock()
	if s.channels[ch.hash] == ch {
		delete(s.channels, ch.hash)
	}
	s.mu.Unlock()
	ch.ctl.Close()
	ch.exec.Close()
}

// takeChannel finds the executor awaiting the channel of this secret, in
// tenant t's connections; the secret is then spent.
func (s *Server) takeChannel(secret []byte, t *Tenant) (*channel, error) {
	h := sha256.Sum256(secret)
	name := ""
	if t != nil {
		name = t.Name
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[h]
	if ch == nil || ch.tenant != name {
		return nil, &refusal{cudaNotPermitted, "no connection awaits a host-function channel with this secret"}
	}
	delete(s.channels, h)
	return ch, nil
}

// relay ends TLS here: it returns one end of a socket pair for the
// executor and copies between the other end and c until either side ends.
// The client's end of stream reaches the executor as its own; the
// executor's exit closes the connection.
func (s *Server) relay(c *tls.Conn) (*os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("socket pair for the executor: %w", err)
	}
	ours := os.NewFile(uintptr(fds[1]), "relay")
	pc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		unix.Close(fds[0])
		c.Close()
		return nil, err
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		io.Copy(pc, c)
		pc.(*net.UnixConn).CloseWrite()
	}()
	go func() {
		defer s.wg.Done()
		io.Copy(c, pc)
		c.Close()
		pc.Close()
	}()
	return os.NewFile(uintptr(fds[0]), "executor"), nil
}

// shutdown ends every executor: their clients see the server go.
func (s *Server) shutdown() {
	s.mu.Lock()
	s.closing = true
	for _, e := range s.execs {
		e.proc.Signal(syscall.SIGTERM)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
