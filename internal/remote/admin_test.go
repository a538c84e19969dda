package remote

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestAdminPath(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	tcp, _ := ParseAddr("tcp://0.0.0.0:7070")
	tls, _ := ParseAddr("tls://[::1]:7071")
	for _, c := range []struct {
		flag, listen, want string
	}{
		{"", "unix:///run/flexgv.sock", "/run/flexgv.sock.admin"},
		{"", "shm:///run/flexgv.sock", "/run/flexgv.sock.admin"},
		{"", tcp.String(), "/run/user/1000/flexgv/serve-0.0.0.0-7070.admin"},
		{"", tls.String(), "/run/user/1000/flexgv/serve-::1-7071.admin"},
		{"unix:///run/a.admin", tcp.String(), "/run/a.admin"},
		{"/run/a.admin", "unix:///run/flexgv.sock", "/run/a.admin"},
	} {
		a, _ := ParseAddr(c.listen)
		if got, err := AdminPath(c.flag, a); err != nil || got != c.want {
			t.Errorf("--admin %q, --listen %s: %q %v, want %q", c.flag, c.listen, got, err, c.want)
		}
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if got, err := AdminPath("", tcp); err != nil || got != filepath.Join(os.TempDir(), "flexgv-"+strconv.Itoa(os.Geteuid()), "serve-0.0.0.0-7070.admin") {
		t.Errorf("without XDG_RUNTIME_DIR: %q %v", got, err)
	}
	for _, bad := range []string{"a.admin", "tcp://h:1", "shm:///run/a.admin", "unix://run/a.admin", "/" + strings.Repeat("x", 110)} {
		if got, err := AdminPath(bad, tcp); err == nil {
			t.Errorf("--admin %q: accepted as %q", bad, got)
		}
	}
}

// adminServer serves the admin socket of a server with fake executors,
// at a new folder's admin.sock; the socket goes when the server does.
func adminServer(t *testing.T, dir string) (*Server, string, string) {
	t.Helper()
	s, sock, _ := testServer(t)
	path := filepath.Join(dir, "sub", "admin.sock")
	l, err := ListenAdmin(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.ServeAdmin(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if _, err := os.Lstat(path); err == nil {
			t.Errorf("%s is left after the server", path)
		}
	})
	return s, sock, path
}

// rawAdmin sends bytes as a request and reads the answer line.
func rawAdmin(t *testing.T, path, req string) string {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(req))
	c.(*net.UnixConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b := make([]byte, 8192)
	n, _ := c.Read(b)
	return string(b[:n])
}

// The admin socket is the server's user's alone; it answers a migration
// request with the results, and bad requests with why.
func TestAdminSocket(t *testing.T) {
	s, sock, path := adminServer(t, t.TempDir())
	for p, want := range map[string]os.FileMode{filepath.Dir(path): 0o700 | os.ModeDir, path: 0o600 | os.ModeSocket} {
		if st, err := os.Lstat(p); err != nil || st.Mode() != want {
			t.Errorf("%s: %v %v, want %v", p, st.Mode(), err, want)
		}
	}
	for req, want := range map[string]string{
		"not json\n":                    `{"v":1,"error":"the request is not a JSON object: invalid character 'o' in literal null (expecting 'u')"}`,
		`{"v":2,"op":"migrate"}` + "\n": `{"v":1,"error":"request version 2: this server speaks version 1"}`,
		`{"op":"migrate"}` + "\n":       `{"v":1,"error":"request version 0: this server speaks version 1"}`,
		`{"v":1,"op":"migrate","to":"unix:///b","all":true,"x":1}` + "\n":       `{"v":1,"error":"bad request: json: unknown field \"x\""}`,
		`{"v":1,"op":"suspend"}` + "\n":                                         `{"v":1,"error":"unknown op \"suspend\" (want migrate)"}`,
		`{"v":1,"op":"migrate","to":"unix:///b","all":true}` + "\n":             `{"v":1,"error":"wait_ms 0: want 1 to 3600000"}`,
		`{"v":1,"op":"migrate","to":"b","all":true,"wait_ms":1}` + "\n":         `{"v":1,"error":"target address \"b\": no scheme (want unix:///PATH, shm:///PATH, tcp://HOST:PORT or tls://HOST:PORT)"}`,
		`{"v":1,"op":"migrate","to":"unix:///b","wait_ms":1}` + "\n":            `{"v":1,"error":"select the executors by one of tenant, pid or all"}`,
		`{"v":1,"op":"migrate","to":"unix:///b","all":true,"wait_ms":1}` + "\n": `{"v":1,"error":"no executor runs on this server: no program is connected"}`,
		`{"v":1,"op":"migrate","to":"unix:///b","all":true,"wait_ms":1}`:        `{"v":1,"error":"the request ended before its newline"}`,
		strings.Repeat(" ", maxAdminRequest) + "\n":                             `{"v":1,"error":"the request is longer than 4096 bytes"}`,
	} {
		if got := rawAdmin(t, path, req); got != want+"\n" {
			t.Errorf("%.60q: %q, want %q", req, got, want)
		}
	}
	a := connect(t, s, sock, "a")
	got := make(chan AdminAnswer, 1)
	go func() {
		ans, err := AdminCall(path, AdminRequest{Op: "migrate", To: "unix:///tmp/b.sock", Tenant: "a", WaitMs: 60000})
		if err != nil {
			ans.Error = err.Error()
		}
		got <- ans
	}()
	a.call('m')
	if ans := <-got; ans.Error != "" || len(ans.Results) != 1 || ans.Results[0] != (MigrateResult{Pid: a.pid, Tenant: "a", Peer: "local", Outcome: Moved, Target: "unix:///tmp/b.sock", PauseMs: 120}) {
		t.Errorf("%+v", ans)
	}
}

// A socket left by a server that is gone is replaced; a live server's is
// not taken over.
func TestAdminSocketStaleAndLive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin.sock")
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close()
	l, err := ListenAdmin(path)
	if err != nil {
		t.Fatalf("a stale socket: %v", err)
	}
	defer l.Close()
	if l2, err := ListenAdmin(path); err == nil || !strings.Contains(err.Error(), "a server is already listening there") {
		if l2 != nil {
			l2.Close()
		}
		t.Errorf("a live server's socket: %v", err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("the live server lost its socket: %v", err)
	}
}

// Only the server's user and root are served: another user is refused by
// its credentials even where the socket's mode would let it in.
func TestAdminSocketRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to connect as another user")
	}
	nobody, err := LookupExecUser("nobody")
	if err != nil {
		t.Skip(err)
	}
	// A folder nobody can reach, with a copy of this binary to run as it.
	dir, err := os.MkdirTemp("", "flexgv-admin-test")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	self, _ := os.Executable()
	bin, _ := os.ReadFile(self)
	exe := filepath.Join(dir, "client")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	_, _, path := adminServer(t, dir)
	os.Chmod(filepath.Dir(path), 0o755)
	asNobody := func() string {
		out, err := asUser(nobody, exe, "FLEXGV_TEST_ADMIN_CLIENT="+path).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		return strings.TrimSpace(string(out))
	}
	if out := asNobody(); !strings.Contains(out, "permission denied") {
		t.Errorf("another user, socket of mode 0600: %q", out)
	}
	os.Chmod(path, 0o666)
	if out, want := asNobody(), "refused: user "+strconv.Itoa(int(nobody.Uid))+" is neither the server's user (0) nor root <nil>"; out != want {
		t.Errorf("another user, socket of mode 0666: %q, want %q", out, want)
	}

	// Nor does flexgv migrate ask a socket another user put in the
	// server's place.
	theirs := filepath.Join(dir, "theirs")
	os.Mkdir(theirs, 0o755)
	os.Chown(theirs, int(nobody.Uid), int(nobody.Gid))
	fake := asUser(nobody, exe, "FLEXGV_TEST_ADMIN_LISTEN="+filepath.Join(theirs, "admin.sock"))
	in, _ := fake.StdinPipe()
	out, _ := fake.StdoutPipe()
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	defer fake.Wait()
	defer in.Close()
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "listening <nil>\n" {
		t.Fatalf("the other user's socket: %q", line)
	}
	_, err = AdminCall(filepath.Join(theirs, "admin.sock"), AdminRequest{Op: "migrate", To: "unix:///tmp/b.sock", All: true, WaitMs: 1000})
	if want := filepath.Join(theirs, "admin.sock") + " is served by user " + strconv.Itoa(int(nobody.Uid)) + ", neither this user (0) nor root"; err == nil || err.Error() != want {
		t.Errorf("a socket of another user: %v, want %s", err, want)
	}
}

// asUser is exe run as u with env alone.
func asUser(u *ExecUser, exe string, env ...string) *exec.Cmd {
	cmd := exec.Command(exe)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.Uid, Gid: u.Gid}}
	return cmd
}

// A folder another user owns is not used: they could swap the socket.
func TestAdminSocketRefusesAnotherUsersFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give a folder to another user")
	}
	dir := filepath.Join(t.TempDir(), "flexgv-0")
	os.Mkdir(dir, 0o700)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "serve-h-1.admin")
	if l, err := ListenAdmin(path); err == nil || err.Error() != "admin socket "+path+": its folder is user 65534's" {
		if l != nil {
			l.Close()
		}
		t.Errorf("%v", err)
	}
}
