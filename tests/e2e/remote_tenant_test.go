package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
)

// cert writes a self-signed certificate for hosts (IP addresses or names)
// and its key, and returns their paths.
func (e *env) cert(name string, hosts ...string) (string, string) {
	e.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		e.t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		e.t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		e.t.Fatal(err)
	}
	cert, keyFile := filepath.Join(e.dir, name+".pem"), filepath.Join(e.dir, name+".key")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, keyFile
}

// token writes a fresh token file for a tenant and returns its path.
func (e *env) token(name string) string {
	e.t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	p := filepath.Join(e.dir, name+".token")
	if err := os.WriteFile(p, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// remoteAs runs a client under flexgv run --remote with a token file.
func (e *env) remoteAs(s *server, token, name string, args ...string) result {
	e.t.Helper()
	return e.runIn("", "flexgv", append([]string{"run", "--remote", s.addr, "--token-file", token, "--", bin(name)}, args...)...)
}

// A remote tenant's memory quota is enforced on the server: its program
// sees exactly what a local tenant with that quota sees (the boundary, the
// memory views, every allocation path charged and released), over either
// transport.
func TestRemoteTenantQuota(t *testing.T) {
	long(t)
	e := quotaEnv(t)
	for _, transport := range []string{"unix", "tcp", "tls"} {
		t.Run(transport, func(t *testing.T) {
			tok := e.token("a-" + transport)
			s := e.serve(transport, "--tenant", "a:"+tok, "--mem", "256MiB", "--ctx-mem", "64MiB")
			for _, mode := range []string{"exact", "info", "paths"} {
				local := e.run("flexgv", "run", "--mem", "256MiB", "--ctx-mem", "64MiB", "--", bin("memclient"), mode)
				got := e.remoteAs(s, tok, "memclient", mode)
				if local.code != 0 || got.code != 0 || got.stdout != local.stdout {
					t.Errorf("memclient %s remotely: exit %d %q\n%s\nlocally: exit %d %q", mode, got.code, got.stdout, got.stderr,
						local.code, local.stdout)
				}
			}
			want := fmt.Sprintf("room %d: one byte more -> CUDA_ERROR_OUT_OF_MEMORY", (256-64)*mib)
			if r := e.remoteAs(s, tok, "memclient", "exact"); !strings.Contains(r.stdout, want) {
				t.Errorf("memclient exact: %q, want %q", r.stdout, want)
			}
			// The refusal is the server's shim's, in the tenant's executor.
			s.waitLog(`tenant a: device 0 .*quota 256MiB.*refused with CUDA_ERROR_OUT_OF_MEMORY`, 10*time.Second)
		})
	}
}

// Two tokens are two tenants, each with its own quota; each token reaches
// only its own tenant.
func TestRemoteTwoTenants(t *testing.T) {
	e := quotaEnv(t)
	ta, tb := e.token("a"), e.token("b")
	s := e.serve("unix", "--tenant", "a:"+ta, "--mem", "256MiB", "--ctx-mem", "64MiB",
		"--tenant", "b:"+tb, "--mem", "1GiB", "--ctx-mem", "64MiB")
	for _, c := range []struct {
		token string
		room  int
	}{{ta, 256 - 64}, {tb, 1024 - 64}, {ta, 256 - 64}} {
		r := e.remoteAs(s, c.token, "memclient", "exact")
		want := fmt.Sprintf("room %d: one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS, then free 0\n", c.room*mib)
		if r.code != 0 || r.stdout != want {
			t.Errorf("%s: exit %d %q, want %q\n%s", filepath.Base(c.token), r.code, r.stdout, want, r.stderr)
		}
	}
	// The tokens decide who is served: any local user may open the socket.
	if st, err := os.Stat(strings.TrimPrefix(s.addr, "unix://")); err != nil || st.Mode().Perm() != 0o666 {
		t.Errorf("the socket of a server with tenants: %v %v, want mode 0666", st.Mode(), err)
	}
	// The server's log is read as it comes: the last line may lag the client.
	s.waitLog(`(?s)\(tenant a\) connected.*\(tenant b\) connected.*\(tenant a\) connected`, 10*time.Second)
	if m := regexp.MustCompile(`\(tenant (\w)\) connected`).FindAllStringSubmatch(s.Log(), -1); len(m) != 3 ||
		m[0][1] != "a" || m[1][1] != "b" || m[2][1] != "a" {
		t.Errorf("connections not in tenants a, b, a:\n%s", s.Log())
	}
	// Both tenants are on the server, each with its quota.
	r := e.run("flexgv", "ps")
	for _, row := range []string{`(?m)^a\s+0 GPU-f1e96000\s+256MiB\s`, `(?m)^b\s+0 GPU-f1e96000\s+1GiB\s`} {
		if !regexp.MustCompile(row).MatchString(r.stdout) {
			t.Errorf("flexgv ps has no row %s:\n%s", row, r.stdout)
		}
	}
}

// A client without the right token is refused, says why, and never gets
// an executor; the peer of a raw connection is told why as well.
func TestRemoteTokenRefused(t *testing.T) {
	e := quotaEnv(t)
	ta := e.token("a")
	s := e.serve("unix", "--tenant", "a:"+ta, "--mem", "1GiB")
	wrong := e.token("wrong")
	for _, c := range []struct {
		name   string
		run    func() result
		client string // what the program's stderr says
		server string // what the server logs
	}{
		{"no token", func() result { return e.remote(s, "direct") }, "refused the connection: no token", "refused: no token"},
		{"a wrong token", func() result { return e.remoteAs(s, wrong, "direct") }, "refused the connection: wrong token",
			"refused: wrong token"},
	} {
		before := strings.Count(s.Log(), "refused: ")
		r := c.run()
		if r.code != 1 || !strings.Contains(r.stderr, "flexgv remote: the server "+s.addr+" "+c.client) || !strings.Contains(r.stderr, "failed: 800") {
			t.Errorf("%s: exit %d\n%s", c.name, r.code, r.stderr)
		}
		s.waitLog(fmt.Sprintf(`(?s)(?:refused: .*){%d}`, before+1), 10*time.Second)
		if !strings.Contains(s.Log(), c.server) {
			t.Errorf("%s: the server did not log %q:\n%s", c.name, c.server, s.Log())
		}
	}
	// A token file the client cannot use is refused before the program runs.
	short := filepath.Join(e.dir, "short.token")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if r := e.remoteAs(s, short, "direct"); r.code != 2 || !strings.Contains(r.stderr, "--token-file: token file "+short+": 3 bytes of token, want at least 16") {
		t.Errorf("short token: exit %d %q", r.code, r.stderr)
	}
	if r := e.remoteAs(s, filepath.Join(e.dir, "none"), "direct"); r.code != 2 || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("missing token file: exit %d %q", r.code, r.stderr)
	}
	// Without flexgv run, the library says the same of the variable.
	e.extra = append(e.extra, "FLEXGV_REMOTE="+s.addr, "FLEXGV_REMOTE_TOKEN_FILE="+short)
	if r := e.runIn(filepath.Join(build, "remote"), "direct"); r.code != 1 ||
		!strings.Contains(r.stderr, "the token file "+short+" holds 3 bytes of token, want 16 to 1024") || !strings.Contains(r.stderr, "failed: 800") {
		t.Errorf("short token in the environment: exit %d %q", r.code, r.stderr)
	}
	e.extra = e.extra[:len(e.extra)-2]

	// Raw connections: each is answered with its refusal, then closed.
	tok, _ := os.ReadFile(ta)
	good := strings.TrimSpace(string(tok))
	frame := func(body w) []byte { return append(w{}.u32(uint32(len(body))), body...) }
	p := readProtocol(t)
	for _, c := range []struct {
		name   string
		frame  []byte
		result uint32
		why    string
	}{
		{"no token", auth(""), 800, "no token"},
		{"the token cut by one byte", auth(good[:len(good)-1]), 800, "wrong token"},
		{"the token and one byte more", auth(good + "x"), 800, "wrong token"},
		{"a client of the previous protocol", p.hello(p.hash), 801, "not a FlexGV authentication frame"},
		{"another protocol version", frame(w{}.u32(0x41524746).u32(1).u8(0)), 801, fmt.Sprintf("not a FlexGV authentication frame of protocol %d", protoVersion)},
		{"a token longer than its frame", frame(w{}.u32(0x41524746).u32(protoVersion).u8(1).u64(100).raw(good)), 801, "a malformed authentication frame"},
		{"an empty token", frame(w{}.u32(0x41524746).u32(protoVersion).u8(1).u64(0)), 801, "a malformed authentication frame"},
		{"a frame over the limit", w{}.u32(1 << 20), 801, "(1048576 bytes) is not a FlexGV authentication frame"},
	} {
		conn, err := net.Dial("unix", strings.TrimPrefix(s.addr, "unix://"))
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(c.frame)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		reply, err := io.ReadAll(conn)
		conn.Close()
		if err != nil || len(reply) < 8 || int(binary.LittleEndian.Uint32(reply)) != len(reply)-4 {
			t.Errorf("%s: reply %q, %v", c.name, reply, err)
			continue
		}
		if r := binary.LittleEndian.Uint32(reply[4:]); r != c.result || !strings.Contains(string(reply), c.why) {
			t.Errorf("%s: answered %d %q, want %d and %q", c.name, r, reply[8:], c.result, c.why)
		}
	}
	s.waitLog(`(?s)(?:refused: .*){10}`, 10*time.Second)
	if n := strings.Count(s.Log(), "connected: executor pid"); n != 0 {
		t.Errorf("%d executors started for refused peers:\n%s", n, s.Log())
	}
	if r := e.remoteAs(s, ta, "direct"); r.code != 0 {
		t.Errorf("the right token after the refusals: exit %d\n%s", r.code, r.stderr)
	}
}

// flexgv ps on the server lists the remote tenant with its executor, and
// the memory the program holds through it.
func TestRemoteTenantPs(t *testing.T) {
	e := quotaEnv(t)
	tok := e.token("a")
	s := e.serve("unix", "--tenant", "a:"+tok, "--mem", "256MiB", "--ctx-mem", "64MiB")
	e.extra = append(e.extra, "FLEXGV_REMOTE_TOKEN_FILE="+tok)
	_, stdout, errb, pid := startRemote(t, e, s, "memclient", "fill", "16")
	line, _ := stdout.ReadString('\n')
	if line != fmt.Sprintf("allocated 12 chunks, tenant uses %d\n", 256*mib) {
		t.Fatalf("fill: %q\n%s", line, errb.String())
	}
	r := e.run("flexgv", "ps")
	row := fmt.Sprintf(`(?m)^a\s+0 GPU-f1e96000\s+256MiB\s+256MiB\s.*\s%d\(256MiB\)$`, pid)
	if !regexp.MustCompile(row).MatchString(r.stdout) {
		t.Errorf("flexgv ps does not show executor %d holding the tenant's 256MiB:\n%s%s", pid, r.stdout, r.stderr)
	}
	r = e.run("flexgv", "ps", "--json")
	var infos []tenant.Info
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil || len(infos) != 1 || len(infos[0].Procs) != 1 ||
		infos[0].Procs[0].Pid != pid || infos[0].Procs[0].Used[0] != 256*mib {
		t.Errorf("flexgv ps --json: %v\n%s", err, r.stdout)
	}
}

// A remote tenant's compute share is the server's: the tenant is in the
// GPU's scheduler with it, and its executor takes turns there.
func TestRemoteTenantComputeShare(t *testing.T) {
	e := quotaEnv(t)
	tok := e.token("c")
	s := e.serve("unix", "--tenant", "c:"+tok, "--compute", "30%", "--priority", "high")
	if got := schedPolicy(t, e, "c"); got != "30%/0%/high" {
		t.Fatalf("tenant c in the scheduler: %q", got)
	}
	e.extra = append(e.extra, "FLEXGV_REMOTE_TOKEN_FILE="+tok)
	_, _, errb, pid := startRemote(t, e, s, "spinner", "200", "30")
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, err := sched.Read(e.stateDir(), simUUID0)
		if err != nil {
			t.Fatal(err)
		}
		var pids []int32
		for _, x := range g.Tenants {
			if x.Name == "c" {
				pids = x.Pids
			}
		}
		if len(pids) == 1 && int(pids[0]) == pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler has %v for tenant c, not executor %d\n%s%s", pids, pid, errb.String(), s.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Bad tenant flags are refused before the server listens, with a message.
func TestRemoteServeTenantFlags(t *testing.T) {
	long(t)
	e := quotaEnv(t)
	ta, tb := e.token("a"), e.token("b")
	short := filepath.Join(e.dir, "short.token")
	os.WriteFile(short, []byte("abc"), 0o600)
	sock := "unix://" + filepath.Join(e.dir, "s.sock")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mem", "1GiB", "--tenant", "a:" + ta}, "limits apply to the --tenant NAME:TOKEN_FILE before them"},
		{[]string{"--tenant", "a"}, "want NAME:TOKEN_FILE"},
		{[]string{"--tenant", "a b:" + ta}, "tenant name \"a b\""},
		{[]string{"--tenant", "a:" + ta, "--tenant", "a:" + tb}, "tenant a is given twice"},
		{[]string{"--tenant", "a:" + ta, "--mem", "1GiB", "--mem", "2GiB"}, "given twice for tenant a"},
		{[]string{"--tenant", "a:" + ta, "--mem", "1GiB", "--tenant", "b:" + ta, "--mem", "1GiB"}, "tenants a and b have the same token"},
		{[]string{"--tenant", "a:" + short}, "--tenant a: token file " + short + ": 3 bytes of token"},
		{[]string{"--tenant", "a:" + filepath.Join(e.dir, "none")}, "--tenant a: token file open"},
		{[]string{"--tenant", "a:" + ta, "--mem", "lots"}, "--tenant a: "},
		{[]string{"--tenant", "a:" + ta, "--priority", "urgent"}, "--priority \"urgent\""},
		{[]string{"--tenant", "a:" + ta}, "group a does not exist"},
		{[]string{"--open", "--tenant", "a:" + ta, "--mem", "1GiB"}, "--open and --tenant: give one"},
	} {
		r := e.run("flexgv", append([]string{"serve", "--listen", sock}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d %q, want %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if r := e.run("flexgv", "serve", "--listen", "shm://"+filepath.Join(e.dir, "s.sock")); r.code != 2 ||
		!strings.Contains(r.stderr, "listen on unix://"+filepath.Join(e.dir, "s.sock")+"; clients on this host may dial it as shm://") {
		t.Errorf("--listen shm://: exit %d %q", r.code, r.stderr)
	}
	if r := e.run("flexgv", "serve", "--listen", "tcp://127.0.0.1:1"); r.code != 2 || !strings.Contains(r.stderr, "give --tenant NAME:TOKEN_FILE") {
		t.Errorf("TCP without tenants: exit %d %q", r.code, r.stderr)
	}
	// Nothing was left behind by the refused servers.
	if infos, _, err := tenant.List(e.stateDir()); err != nil || len(infos) != 0 {
		t.Errorf("tenants left: %v %v", infos, err)
	}
	for _, c := range []struct{ args, want string }{
		{"--token-file " + ta, "--token-file is for --remote ADDR"},
		{"--remote " + sock + " --compute 30%", "--compute with --remote: a remote program's limits are set on the server"},
		{"--remote " + sock + " --priority high", "--priority with --remote"},
		{"--remote " + sock + " --sm 50%", "--sm with --remote: a remote program's limits are set on the server"},
	} {
		r := e.run("flexgv", append(append([]string{"run"}, strings.Fields(c.args)...), "--", "true")...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("run %s: exit %d %q, want %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if r := e.run("flexgv", "run", "--remote", sock, "--token-file=", "--", "true"); r.code != 2 || !strings.Contains(r.stderr, "--token-file is empty") {
		t.Errorf("empty --token-file: exit %d %q", r.code, r.stderr)
	}
}

// Over tls:// the client trusts only the server its CA file names, for the
// address it connects to; a peer that does not speak TLS, or does not
// trust the server, gets no executor.
func TestRemoteTLS(t *testing.T) {
	long(t)
	e := newEnv(t)
	tok := e.token("a")
	cert, key := e.cert("local", "localhost") // a name, not 127.0.0.1
	other, _ := e.cert("other", "127.0.0.1", "localhost")
	s := e.serve("tls", "--tls-cert", cert, "--tls-key", key, "--tenant", "a:"+tok, "--mem", "1GiB")
	byName := "tls://localhost:" + strings.TrimPrefix(s.addr, "tls://127.0.0.1:")
	run := func(addr, ca string) result {
		e.extra = []string{"FLEXGV_REMOTE_CA_FILE=" + ca}
		return e.runIn("", "flexgv", "run", "--remote", addr, "--token-file", tok, "--", bin("rtlike"), "1")
	}
	if r := run(byName, cert); r.code != 0 || !strings.Contains(r.stdout, "rtlike: ok") {
		t.Fatalf("the certificate's name: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, c := range []struct{ name, addr, ca, want string }{
		{"an address the certificate does not name", s.addr, cert, "is not trusted: IP address mismatch"},
		{"another CA", byName, other, "is not trusted: self-signed certificate"},
		{"plain TCP to a TLS server", "tcp://" + strings.TrimPrefix(s.addr, "tls://"), cert, "no answer to the authentication"},
	} {
		r := run(c.addr, c.ca)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "failed: 46") {
			t.Errorf("%s: exit %d %q, want %q", c.name, r.code, r.stderr, c.want)
		}
	}
	s.waitLog(`(?s)(?:refused: TLS handshake: .*){3}`, 10*time.Second)
	if n := strings.Count(s.Log(), "connected: executor pid"); n != 1 {
		t.Errorf("%d executors for 1 trusted client:\n%s", n, s.Log())
	}
	// The token is on the wire in clear over tcp://, never over tls://.
	secret, _ := os.ReadFile(tok)
	secret = []byte(strings.TrimSpace(string(secret)))
	plain := e.serve("tcp", "--tenant", "a:"+tok, "--mem", "1GiB")
	for _, c := range []struct {
		srv   *server
		clear bool
	}{{s, false}, {plain, true}} {
		scheme, target, _ := strings.Cut(c.srv.addr, "://")
		wire, addr := tap(t, target)
		if r := run(scheme+"://localhost:"+addr[strings.LastIndex(addr, ":")+1:], cert); r.code != 0 {
			t.Fatalf("%s through the tap: exit %d\n%s", scheme, r.code, r.stderr)
		}
		if got := wire(); len(got) < 100 || bytes.Contains(got, secret) != c.clear {
			t.Errorf("%s: %d bytes on the wire, the token in clear: %v", scheme, len(got), bytes.Contains(got, secret))
		}
	}
	// A TLS client of a plain TCP server is told nothing it could trust.
	if r := run("tls://"+strings.TrimPrefix(plain.addr, "tcp://"), cert); r.code != 1 || !strings.Contains(r.stderr, "no TLS with tls://") {
		t.Errorf("TLS to a plain server: exit %d %q", r.code, r.stderr)
	}
	// The flags go together, with tls:// only.
	sock := "tls://127.0.0.1:1"
	for _, c := range []struct{ args, want string }{
		{"--listen " + sock + " --open", "needs --tls-cert and --tls-key"},
		{"--listen " + sock + " --open --tls-cert " + cert, "needs --tls-cert and --tls-key"},
		{"--listen tcp://127.0.0.1:1 --open --tls-cert " + cert + " --tls-key " + key, "are for --listen tls://"},
		{"--listen " + sock + " --open --tls-cert " + key + " --tls-key " + cert, "--tls-cert " + key},
	} {
		r := e.run("flexgv", append([]string{"serve"}, strings.Fields(c.args)...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("serve %s: exit %d %q, want %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// tap forwards connections on a loopback port to target and records what
// the client sent; it returns the record so far and the port's address.
func tap(t *testing.T, target string) (func() []byte, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	var got bytes.Buffer
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(c, u); c.Close() }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					mu.Lock()
					got.Write(buf[:n])
					mu.Unlock()
					if _, werr := u.Write(buf[:n]); err != nil || werr != nil {
						u.Close()
						return
					}
				}
			}()
		}
	}()
	return func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Clone(got.Bytes())
	}, l.Addr().String()
}

// A --tenant without limits joins the group of that name: a local run and
// the remote program share its quota.
func TestRemoteTenantJoinsLocalGroup(t *testing.T) {
	e := quotaEnv(t)
	stop := e.start(t, "flexgv", "run", "--group", "g", "--mem", "1GiB", "--ctx-mem", "64MiB", "--", bin("holder"), "300")
	defer stop()
	tok := e.token("g")
	s := e.serve("unix", "--tenant", "g:"+tok)
	want := fmt.Sprintf("room %d: one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS, then free 0\n", (1024-64-300-64)*mib)
	if r := e.remoteAs(s, tok, "memclient", "exact"); r.code != 0 || r.stdout != want {
		t.Errorf("beside a local holder of 300MiB: exit %d %q, want %q\n%s", r.code, r.stdout, want, r.stderr)
	}
}

// Limits name the server's GPUs: with --gpus 1 the client's device 0 is
// the server's 1, and the quota of the server's 1 is the one it meets.
func TestRemoteTenantQuotaFollowsTheGPU(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_SIM_DEVICES=2")
	tok := e.token("a")
	s := e.serve("unix", "--gpus", "1", "--tenant", "a:"+tok, "--mem", "0=1GiB,1=256MiB", "--ctx-mem", "64MiB")
	want := fmt.Sprintf("room %d: one byte more -> CUDA_ERROR_OUT_OF_MEMORY", (256-64)*mib)
	if r := e.remoteAs(s, tok, "memclient", "exact"); r.code != 0 || !strings.HasPrefix(r.stdout, want) {
		t.Errorf("device 0 of the client, 1 of the server: exit %d %q, want %q\n%s", r.code, r.stdout, want, r.stderr)
	}
}

// A tenant's executor that cannot use its tenant file is refused CUDA,
// even where the server's environment asks local runs to pass through.
func TestRemoteTenantFailsClosed(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_ON_ERROR=passthrough")
	tok := e.token("a")
	s := e.serve("unix", "--tenant", "a:"+tok, "--mem", "256MiB", "--ctx-mem", "64MiB")
	if err := os.Remove(tenant.Path(e.stateDir(), "a")); err != nil {
		t.Fatal(err)
	}
	if r := e.remoteAs(s, tok, "memclient", "exact"); r.code != 1 || !strings.Contains(r.stderr, "cuInit(0) failed: 800") {
		t.Errorf("without its tenant file: exit %d %q%q", r.code, r.stdout, r.stderr)
	}
	s.waitLog(`cannot open tenant .*CUDA is refused`, 10*time.Second)
}

// --tenant-dir admits a tenant while its token file is in the folder (the
// server's own, mode 0600), into the tenant that exists with its limits;
// files added or removed count from the next connection; a token without
// its tenant, and a folder others could write to, are refused.
func TestRemoteTenantDir(t *testing.T) {
	e := quotaEnv(t)
	stop := e.start(t, "flexgv", "run", "--group", "g", "--mem", "1GiB", "--ctx-mem", "64MiB", "--", bin("holder"), "300")
	defer stop()
	dir := filepath.Join(e.dir, "tokens")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := e.serve("unix", "--tenant-dir", dir)
	tok := e.token("g")
	refused := func(what, why string) {
		t.Helper()
		if r := e.remoteAs(s, tok, "direct"); r.code != 1 || !strings.Contains(r.stderr, why) {
			t.Errorf("%s: exit %d\n%s", what, r.code, r.stderr)
		}
	}
	refused("no file yet", "refused the connection: wrong token")
	data, _ := os.ReadFile(tok)
	mine := filepath.Join(dir, "g.token")
	if err := os.WriteFile(mine, data, 0o600); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("room %d: one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS, then free 0\n", (1024-64-300-64)*mib)
	if r := e.remoteAs(s, tok, "memclient", "exact"); r.code != 0 || r.stdout != want {
		t.Errorf("admitted into g beside its holder of 300MiB: exit %d %q, want %q\n%s", r.code, r.stdout, want, r.stderr)
	}
	os.Chmod(mine, 0o644)
	refused("a file others can read", "refused the connection: wrong token")
	os.Rename(mine, filepath.Join(dir, "nobody.token"))
	os.Chmod(filepath.Join(dir, "nobody.token"), 0o600)
	refused("a token without its tenant", "tenant nobody has a token but no tenant on the server")
	os.Remove(filepath.Join(dir, "nobody.token"))
	refused("revoked", "refused the connection: wrong token")

	os.Chmod(dir, 0o777)
	r := e.run("flexgv", "serve", "--listen", "unix://"+filepath.Join(e.dir, "s2.sock"), "--tenant-dir", dir)
	if r.code != 2 || !strings.Contains(r.stderr, "--tenant-dir: "+dir+" is writable by others") {
		t.Errorf("a folder others can write to: exit %d %q", r.code, r.stderr)
	}
	if r := e.run("flexgv", "serve", "--listen", "tcp://127.0.0.1:1", "--open", "--tenant-dir", dir); r.code != 2 ||
		!strings.Contains(r.stderr, "--open and --tenant-dir: give one") {
		t.Errorf("--open with --tenant-dir: exit %d %q", r.code, r.stderr)
	}
}
