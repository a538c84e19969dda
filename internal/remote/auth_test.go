package remote

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Go and C views of the authentication frame agree.
func TestWireConstantsMatchC(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "remote", "wire.h"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint64{"FGR_PROTO_VERSION": ProtoVersion, "FGR_AUTH_MAGIC": AuthMagic, "FGR_CHANNEL_MAGIC": ChannelMagic,
		"FGR_CHANNEL_SECRET": SecretLen,
		"FGR_MIN_TOKEN":      MinToken, "FGR_MAX_TOKEN": MaxToken} {
		m := regexp.MustCompile(`#define ` + name + ` (0x[0-9a-f]+|\d+)u`).FindStringSubmatch(string(data))
		if m == nil {
			t.Errorf("remote/wire.h does not define %s", name)
			continue
		}
		if got, _ := strconv.ParseUint(m[1], 0, 64); got != want {
			t.Errorf("%s is %d in C, %d in Go", name, got, want)
		}
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "t")
		os.WriteFile(p, []byte(s), 0o600)
		return p
	}
	if tok, err := ReadToken(write("0123456789abcdef \r\n\n")); err != nil || string(tok) != "0123456789abcdef" {
		t.Errorf("%q %v", tok, err)
	}
	for _, bad := range []string{"", "short\n", "0123456789abcde\n", strings.Repeat("x", MaxToken+1)} {
		if tok, err := ReadToken(write(bad)); err == nil {
			t.Errorf("%q: accepted as %q", bad, tok)
		}
	}
	if _, err := ReadToken(filepath.Join(dir, "none")); err == nil {
		t.Error("a missing file accepted")
	}
}

// authFrame is what a client sends; token "" sends none.
func authFrame(magic, proto uint32, token string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0)
	b = binary.LittleEndian.AppendUint32(b, magic)
	b = binary.LittleEndian.AppendUint32(b, proto)
	if token == "" {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.LittleEndian.AppendUint64(b, uint64(len(token)))
		b = append(b, token...)
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// authenticate over a pipe: the tenant found, and the answer the peer read
// (none when the peer hangs up after sending a frame cut short).
func authOver(s *Server, frame []byte, hangup bool) (*Tenant, error, uint32, string) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		b.Write(frame)
		if hangup {
			b.Close()
		}
	}()
	type res struct {
		t   *Tenant
		err error
	}
	done := make(chan res, 1)
	go func() {
		t, _, err := s.authenticate(a)
		a.Close()
		done <- res{t, err}
	}()
	reply, _ := io.ReadAll(b)
	r := <-done
	if len(reply) < 8 {
		return r.t, r.err, 0xffffffff, ""
	}
	return r.t, r.err, binary.LittleEndian.Uint32(reply[4:]), strings.TrimRight(string(reply[17:]), "\x00")
}

func TestAuthenticateFindsTheTokensTenant(t *testing.T) {
	s := &Server{Tenants: []*Tenant{NewTenant("a", []byte("token-of-tenant-a"), nil), NewTenant("b", []byte("token-of-tenant-b"), nil)}}
	for tok, want := range map[string]string{"token-of-tenant-a": "a", "token-of-tenant-b": "b"} {
		got, err, result, msg := authOver(s, authFrame(AuthMagic, ProtoVersion, tok), false)
		if err != nil || got == nil || got.Name != want || result != 0 || msg != want {
			t.Errorf("%s: tenant %v, %v, answered %d %q", tok, got, err, result, msg)
		}
	}
	for _, c := range []struct {
		frame  []byte
		result uint32
	}{
		{authFrame(AuthMagic, ProtoVersion, ""), cudaNotPermitted},
		{authFrame(AuthMagic, ProtoVersion, "token-of-tenant-"), cudaNotPermitted},
		{authFrame(AuthMagic, ProtoVersion, "token-of-tenant-c"), cudaNotPermitted},
		{authFrame(AuthMagic, ProtoVersion+1, "token-of-tenant-a"), cudaNotSupported},
		{authFrame(AuthMagic+1, ProtoVersion, "token-of-tenant-a"), cudaNotSupported},
		{authFrame(AuthMagic, ProtoVersion, "token-of-tenant-a")[:20], 0xffffffff}, // cut short: no answer
	} {
		got, err, result, msg := authOver(s, c.frame, c.result == 0xffffffff)
		if got != nil || err == nil || result != c.result || (result != 0xffffffff && msg != err.Error()) {
			t.Errorf("%q: tenant %v, %v, answered %d %q", c.frame, got, err, result, msg)
		}
	}
	// A server without tenants serves anyone, with or without a token.
	open := &Server{}
	for _, tok := range []string{"", "any-token-at-all"} {
		if got, err, result, _ := authOver(open, authFrame(AuthMagic, ProtoVersion, tok), false); got != nil || err != nil || result != 0 {
			t.Errorf("open server, token %q: %v %v %d", tok, got, err, result)
		}
	}
}

// syncBuf is a log several goroutines write.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Peers that connect and say nothing hold at most maxPendingNet
// authentications per network: one more closes that network's oldest, so
// a client that authenticates at once is answered however many are held;
// the closures' lines are rate-limited.
func TestPendingAuthenticationsAreBounded(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen(Addr{"unix", sock})
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuf{}
	s := &Server{Executor: "/nonexistent", Log: log, maxPendingNet: 2}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Serve(ctx, l) }()
	defer func() { cancel(); <-done }()
	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var held []net.Conn
	for i := 0; i < 40; i++ {
		held = append(held, dial())
	}
	// All but the last two were closed to make room, the oldest first.
	for i, c := range held[:38] {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("silent peer %d of 40 is not closed: %v", i, err)
		}
	}
	if n := s.pending.count(); n != 2 {
		t.Errorf("%d connections counted as authenticating, want 2", n)
	}
	d := dial()
	_, _, result, msg := authOverConn(d, authFrame(AuthMagic, ProtoVersion+1, ""))
	if result != cudaNotSupported || !strings.Contains(msg, "same FlexGV build") {
		t.Errorf("a peer beside the held ones: answered %d %q\n%s", result, msg, log.String())
	}
	if n := strings.Count(log.String(), "closed a connection that had not authenticated"); n != logBurst {
		t.Errorf("%d closures logged, want %d (rate-limited):\n%s", n, logBurst, log.String())
	}
	for _, c := range held {
		c.Close()
	}
}

// The server's bound is shared fairly: past it, the network holding most
// loses its oldest, never a network holding few.
func TestPendingClosesTheFullestNetwork(t *testing.T) {
	var p pendingConns
	conn := func() net.Conn { a, _ := net.Pipe(); return a }
	for i := 0; i < 3; i++ {
		p.add("10.0.0.0/24", conn(), 8, 4)
	}
	quiet, _, _, _ := p.add("10.0.1.0/24", conn(), 8, 4)
	_, closed, of, held := p.add("10.0.2.0/24", conn(), 8, 4)
	if closed == nil || of != "10.0.0.0/24" || held != 3 || quiet.closed || p.count() != 4 {
		t.Errorf("over the bound: closed %v of %q, the lone one closed %v, %d held", closed, of, quiet.closed, p.count())
	}
}

// authOverConn sends a frame on a client connection and reads the answer.
func authOverConn(c net.Conn, frame []byte) (int, error, uint32, string) {
	defer c.Close()
	c.Write(frame)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	reply, err := io.ReadAll(c)
	if len(reply) < 8 {
		return len(reply), err, 0xffffffff, ""
	}
	return len(reply), err, binary.LittleEndian.Uint32(reply[4:]), strings.TrimRight(string(reply[17:]), "\x00")
}

// addrConn is a connection from a given peer address.
type addrConn struct {
	net.Conn
	addr net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.addr }

// authFrom authenticates frame as sent from addr; it returns the answer.
func authFrom(s *Server, frame []byte, addr string) (uint32, string) {
	a, b := net.Pipe()
	go func() { b.Write(frame) }()
	go func() {
		tcp, _ := net.ResolveTCPAddr("tcp", addr)
		s.authenticate(addrConn{a, tcp})
		a.Close()
	}()
	reply, _ := io.ReadAll(b)
	if len(reply) < 17 {
		return 0xffffffff, ""
	}
	return binary.LittleEndian.Uint32(reply[4:]), strings.TrimRight(string(reply[17:]), "\x00")
}

// A network gets guessBurst wrong tokens, then one per guessEvery, from
// whichever of its addresses: past that its wrong tokens are refused as
// rationed, but a right token is still served; other networks are not
// held up.
func TestWrongTokensAreRationed(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &Server{Tenants: []*Tenant{NewTenant("a", []byte("token-of-tenant-a"), nil)}, now: func() time.Time { return now }, Log: io.Discard}
	right, wrong := authFrame(AuthMagic, ProtoVersion, "token-of-tenant-a"), authFrame(AuthMagic, ProtoVersion, "token-of-tenant-x")
	for i := 0; i < guessBurst; i++ {
		if r, msg := authFrom(s, wrong, fmt.Sprintf("10.0.0.%d:4000", i+1)); r != cudaNotPermitted || !strings.Contains(msg, "wrong token") {
			t.Fatalf("wrong token %d: %d %q", i+1, r, msg)
		}
		if r, _ := authFrom(s, right, "10.0.1.2:4000"); r != 0 {
			t.Fatalf("another network's right token after %d wrong ones: %d", i+1, r)
		}
	}
	for _, f := range [][]byte{wrong, authFrame(AuthMagic, ProtoVersion, "")} {
		if r, msg := authFrom(s, f, "10.0.0.200:5000"); r != cudaNotPermitted || !strings.Contains(msg, "too many wrong tokens from 10.0.0.0/24") {
			t.Errorf("after %d wrong tokens: %d %q", guessBurst, r, msg)
		}
	}
	if r, msg := authFrom(s, right, "10.0.0.201:5000"); r != 0 {
		t.Errorf("the right token from the rationed network: %d %q", r, msg)
	}
	if r, _ := authFrom(s, right, "10.0.1.2:4001"); r != 0 {
		t.Errorf("another network is held up: %d", r)
	}
	now = now.Add(guessEvery)
	if r, msg := authFrom(s, wrong, "10.0.0.1:5002"); r != cudaNotPermitted || !strings.Contains(msg, "wrong token") {
		t.Errorf("one more guess once time has passed: %d %q", r, msg)
	}
	if r, msg := authFrom(s, wrong, "10.0.0.1:5003"); !strings.Contains(msg, "too many wrong tokens") {
		t.Errorf("and only one: %d %q", r, msg)
	}
	// Long after, the network is forgotten: a full bucket again.
	now = now.Add(guessBurst * guessEvery)
	if s.guesses.allowed("10.0.0.0/24", now); len(s.guesses.peers) != 0 {
		t.Errorf("buckets kept after they refilled: %v", s.guesses.peers)
	}
}

// The addresses remembered are bounded: a flood of peers forgets the one
// that guessed least lately.
func TestGuessesAreBounded(t *testing.T) {
	var g guesses
	now := time.Unix(1000, 0)
	for i := 0; i < maxPeers+10; i++ {
		g.wrong(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), now)
	}
	if len(g.peers) != maxPeers {
		t.Errorf("%d peers remembered, want %d", len(g.peers), maxPeers)
	}
}

// Pending connections and guesses count against a peer's network: an
// IPv4 /24, an IPv6 /64, all of loopback, and on a unix socket its user.
func TestNetKey(t *testing.T) {
	for addr, want := range map[string]string{
		"10.1.2.3:4567": "10.1.2.0/24", "10.1.2.250:1": "10.1.2.0/24", "10.1.3.3:4567": "10.1.3.0/24",
		"[fd00::1]:80": "fd00::/64", "[fd00::1:2:3:4]:80": "fd00::/64", "[fd00:0:0:1::1]:80": "fd00:0:0:1::/64",
		"127.0.0.1:9": "loopback", "127.3.4.5:9": "loopback", "[::1]:9": "loopback",
	} {
		tcp, _ := net.ResolveTCPAddr("tcp", addr)
		if got := netOf(tcp); got != want {
			t.Errorf("netOf(%v) = %q, want %q", addr, got, want)
		}
	}
	if got := netOf(nil); got != "local" {
		t.Errorf("netOf(nil) = %q", got)
	}
	a, b, err := socketPair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	if got, want := netKey(a), fmt.Sprintf("uid %d", os.Getuid()); got != want {
		t.Errorf("netKey(unix) = %q, want %q", got, want)
	}
}

// socketPair is two connected unix connections.
func socketPair() (net.Conn, net.Conn, error) {
	dir, err := os.MkdirTemp("", "pair")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	a, err := net.Dial("unix", filepath.Join(dir, "s"))
	if err != nil {
		return nil, nil, err
	}
	b, err := l.Accept()
	return b, a, err
}

// A tenant at its cap of connections is refused with why, said once in the
// log until it is below its cap; other tenants are not held up, and a
// connection that ends gives its room back.
func TestTenantConnectionsAreCapped(t *testing.T) {
	log := &syncBuf{}
	a, b := NewTenant("a", []byte("token-of-tenant-a"), nil), NewTenant("b", []byte("token-of-tenant-b"), nil)
	s := &Server{Tenants: []*Tenant{a, b}, MaxConnsPerTenant: 2, Log: log}
	fa, fb := authFrame(AuthMagic, ProtoVersion, "token-of-tenant-a"), authFrame(AuthMagic, ProtoVersion, "token-of-tenant-b")
	for i := 0; i < 2; i++ {
		if got, err, r, _ := authOver(s, fa, false); got != a || err != nil || r != 0 {
			t.Fatalf("connection %d of a: %v %v %d", i+1, got, err, r)
		}
	}
	for i := 0; i < 2; i++ {
		got, err, r, msg := authOver(s, fa, false)
		if got != nil || r != cudaNotPermitted || msg != "tenant a has 2 connections, its cap (flexgv serve --max-conns-per-tenant 2)" {
			t.Errorf("a over its cap: %v %v %d %q", got, err, r, msg)
		}
		var quiet *limited
		if logged := !errors.As(err, &quiet); logged != (i == 0) {
			t.Errorf("refusal %d over the cap logged: %v, want only the first", i+1, logged)
		}
	}
	if got, err, r, _ := authOver(s, fb, false); got != b || err != nil || r != 0 {
		t.Errorf("b beside a at its cap: %v %v %d", got, err, r)
	}
	s.leave(a)
	if got, err, r, _ := authOver(s, fa, false); got != a || err != nil || r != 0 {
		t.Errorf("a once one of its connections ended: %v %v %d", got, err, r)
	}
	if _, err, _, _ := authOver(s, fa, false); err == nil || errors.As(err, new(*limited)) {
		t.Errorf("a at its cap again: %v, want a refusal said again", err)
	}
}

// channelFrame is the authentication frame of a host-function channel.
func channelFrame(secret []byte, token string) []byte {
	f := authFrame(ChannelMagic, ProtoVersion, token)
	f = append(f[:12:12], append(append([]byte{}, secret...), f[12:]...)...)
	binary.LittleEndian.PutUint32(f, uint32(len(f)-4))
	return f
}

// A host-function channel reaches the executor whose secret it carries,
// once, and only from that executor's tenant; any other secret, a spent
// one or another tenant's is refused.
func TestChannelNeedsItsExecutorsSecret(t *testing.T) {
	a, b := NewTenant("a", []byte("token-of-tenant-a"), nil), NewTenant("b", []byte("token-of-tenant-b"), nil)
	s := &Server{Tenants: []*Tenant{a, b}}
	ch, err := s.newChannel(a)
	if err != nil {
		t.Fatal(err)
	}
	defer s.dropChannel(ch)
	secret := make([]byte, SecretLen)
	if _, err := io.ReadFull(ch.exec, secret); err != nil {
		t.Fatal(err)
	}
	wrong := append([]byte{}, secret...)
	wrong[0] ^= 1
	for _, c := range []struct {
		frame  []byte
		result uint32
	}{
		{channelFrame(wrong, "token-of-tenant-a"), cudaNotPermitted},
		{channelFrame(secret, "token-of-tenant-b"), cudaNotPermitted},
		{channelFrame(secret, "token-of-tenant-x"), cudaNotPermitted},
		{channelFrame(secret[:8], "token-of-tenant-a"), cudaNotSupported},
		{channelFrame(secret, "token-of-tenant-a"), 0},
		{channelFrame(secret, "token-of-tenant-a"), cudaNotPermitted}, // spent
	} {
		got, err, result, msg := authOver(s, c.frame, false)
		if result != c.result || (c.result == 0) != (err == nil && got == a) {
			t.Errorf("answered %d %q (tenant %v, %v), want %d", result, msg, got, err, c.result)
		}
	}
	s.mu.Lock()
	n := s.conns["a"]
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("the channel counts as %d connections of its tenant", n)
	}
}
