package remote

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The authentication frame, the first of every connection (remote/wire.h
// says the same; a test checks that the two agree):
//
//	request  u32 AuthMagic, u32 ProtoVersion, u8 present, u64 n, n bytes of token
//	reply    u32 CUresult (0: accepted), u8 1, u64 n, n bytes: the tenant's name or why not, with its NUL
//
// A connection's host-function channel (remote/executor/hostfn.c) opens
// with ChannelMagic instead, and the secret its executor gave the client
// after ProtoVersion: it is handed to that executor, not given one.
const (
	AuthMagic    = 0x41524746 // "FGRA"
	ChannelMagic = 0x43524746 // "FGRC"
	ProtoVersion = 27
	// SecretLen is the length of a channel's secret.
	SecretLen = 32
	// AuthTimeout is how long a new connection has to authenticate: a
	// client does it at once, in one round trip (two more with TLS).
	AuthTimeout = 5 * time.Second
	// DefaultMaxConnsPerTenant bounds a tenant's connections, and so the
	// executors (processes, host memory) its token can make the server hold.
	DefaultMaxConnsPerTenant = 64
	// MinToken and MaxToken bound a token's length in bytes.
	MinToken = 16
	MaxToken = 1024
	// maxAuthFrame is the longest authentication frame there can be.
	maxAuthFrame = 4 + 4 + SecretLen + 1 + 8 + MaxToken
)

// CUresult values the refusals carry.
const (
	cudaNotSupported = 801 // another build's client
	cudaNotPermitted = 800 // no token, or a wrong one
)

// ReadToken reads a token file: its content without trailing white space
// (the newline an editor or echo leaves), MinToken to MaxToken bytes.
func ReadToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxToken+4096))
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	tok := bytes.TrimRight(data, " \t\r\n")
	switch {
	case len(tok) < MinToken:
		return nil, fmt.Errorf("token file %s: %d bytes of token, want at least %d (e.g. openssl rand -hex 32 > %s)", path, len(tok), MinToken, path)
	case len(tok) > MaxToken:
		return nil, fmt.Errorf("token file %s: longer than %d bytes", path, MaxToken)
	}
	return tok, nil
}

// Tenant is who may connect: the clients that present its token, whose
// executors run with Env added (the shim, preloaded, enforcing the
// tenant's limits).
type Tenant struct {
	Name string
	Env  []string
	hash [sha256.Size]byte
}

// openFile opens the tenant's file twice, read-write, for an executor
// that may not open it itself: one description the shim maps, one it
// locks its slot through (a lock through a mapped description would live
// on in the mapping).
func (t *Tenant) openFile() ([]*os.File, error) {
	if t == nil {
		return nil, nil
	}
	var path string
	for _, kv := range t.Env {
		if p, ok := strings.CutPrefix(kv, "FLEXGV_TENANT="); ok {
			path = p
		}
	}
	if path == "" {
		return nil, errors.New("its executors' environment names no tenant file")
	}
	var given []*os.File
	for range 2 {
		f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
		if err != nil {
			for _, g := range given {
				g.Close()
			}
			return nil, err
		}
		given = append(given, f)
	}
	return given, nil
}

// mps says whether the tenant's executors are MPS clients (an SM share).
// An MPS server serves the processes of one user at a time, the node's
// local ones included: those executors keep the server's user, or they
// would wait for the server of the other user to end.
func (t *Tenant) mps() bool {
	if t == nil {
		return false
	}
	for _, kv := range t.Env {
		if strings.HasPrefix(kv, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=") {
			return true
		}
	}
	return false
}

// NewTenant is the tenant name whose clients present token.
func NewTenant(name string, token []byte, env []string) *Tenant {
	return &Tenant{Name: name, Env: env, hash: sha256.Sum256(token)}
}

// refusal is why a connection was refused, as the server logs it and the
// client is told it.
type refusal struct {
	result uint32
	why    string
}

func (r *refusal) Error() string { return r.why }

// limited is an error whose log line is rate-limited (one a peer can cause
// at will), or not logged at all (nil log: said already).
type limited struct {
	log *logLimit
	err error
}

func (l *limited) Error() string { return l.err.Error() }
func (l *limited) Unwrap() error { return l.err }

// authenticate reads the connection's authentication frame and answers it:
// the tenant whose token it carries (nil when the server has none), or
// why it is refused, said to the peer as well where it can be. A
// host-function channel is not counted as a connection of its tenant: it
// is its executor's, whose connection was (ch, once per executor).
func (s *Server) authenticate(c net.Conn) (*Tenant, *channel, error) {
	c.SetDeadline(time.Now().Add(AuthTimeout))
	defer c.SetDeadline(time.Time{})
	t, secret, err := s.match(c)
	var ch *channel
	if err == nil && secret != nil {
		ch, err = s.takeChannel(secret, t)
	} else if err == nil && t != nil {
		err = s.enter(t)
	}
	var r *refusal
	if errors.As(err, &r) {
		c.Write(authReply(r.result, r.why))
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	name := ""
	if t != nil {
		name = t.Name
	}
	if _, err := c.Write(authReply(0, name)); err != nil {
		if t != nil && ch == nil {
			s.leave(t)
		}
		return nil, nil, err
	}
	return t, ch, nil
}

// enter counts a connection of t, refused when t has its cap already; the
// refusal is logged once until t is below its cap again.
func (s *Server) enter(t *Tenant) error {
	max := s.maxConns()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns, s.atCap = map[string]int{}, map[string]bool{}
	}
	if s.conns[t.Name] >= max {
		err := &refusal{cudaNotPermitted, fmt.Sprintf("tenant %s has %d connections, its cap (flexgv serve --max-conns-per-tenant %d)", t.Name, max, max)}
		if s.atCap[t.Name] {
			return &limited{nil, err}
		}
		s.atCap[t.Name] = true
		return err
	}
	s.conns[t.Name]++
	return nil
}

func (s *Server) maxConns() int {
	if s.MaxConnsPerTenant == 0 {
		return DefaultMaxConnsPerTenant
	}
	return s.MaxConnsPerTenant
}

// leave uncounts a connection of t.
func (s *Server) leave(t *Tenant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns[t.Name]--; s.conns[t.Name] < s.maxConns() {
		delete(s.atCap, t.Name)
	}
	if s.conns[t.Name] <= 0 {
		delete(s.conns, t.Name)
	}
}

// match reads the authentication frame: its tenant, and for a channel
// its secret.
func (s *Server) match(c net.Conn) (*Tenant, []byte, error) {
	var lenb [4]byte
	if _, err := io.ReadFull(c, lenb[:]); err != nil {
		return nil, nil, s.readError(err)
	}
	n := binary.LittleEndian.Uint32(lenb[:])
	if n < 8 || n > maxAuthFrame {
		return nil, nil, &refusal{cudaNotSupported, fmt.Sprintf("the first frame (%d bytes) is not a FlexGV authentication frame: "+
			"use a client and server of the same FlexGV build", n)}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return nil, nil, s.readError(err)
	}
	magic, proto := binary.LittleEndian.Uint32(body), binary.LittleEndian.Uint32(body[4:])
	var secret []byte
	if magic == ChannelMagic && proto == ProtoVersion && len(body) >= 8+SecretLen {
		secret, body = body[8:8+SecretLen], append(body[:8:8], body[8+SecretLen:]...)
		magic = AuthMagic
	}
	if magic != AuthMagic || proto != ProtoVersion {
		return nil, nil, &refusal{cudaNotSupported, fmt.Sprintf("the first frame is not a FlexGV authentication frame of protocol %d: "+
			"use a client and server of the same FlexGV build", ProtoVersion)}
	}
	token, ok := tokenOf(body[8:])
	if !ok {
		return nil, nil, &refusal{cudaNotSupported, "a malformed authentication frame"}
	}
	if len(s.Tenants) == 0 && s.Lookup == nil {
		return nil, secret, nil
	}
	now, network := time.Now(), netKey(c)
	if s.now != nil {
		now = s.now()
	}
	rationed := func() error {
		return &limited{&s.rationLog, &refusal{cudaNotPermitted, fmt.Sprintf("too many wrong tokens from %s: "+
			"one more is allowed every %v", network, guessEvery)}}
	}
	if token == nil {
		if !s.guesses.allowed(network, now) {
			return nil, nil, rationed()
		}
		s.guesses.wrong(network, now)
		return nil, nil, &refusal{cudaNotPermitted, "no token: this server serves tenants with a token each " +
			"(flexgv run --remote ADDR --token-file FILE, or FLEXGV_REMOTE_TOKEN_FILE)"}
	}
	// A token is looked at even from a network past its wrong ones: a
	// tenant there is not locked out by a neighbour who guesses. Every
	// tenant's token is compared, in constant time, as hashes of one
	// length: neither timing nor length says which tenant came close.
	h := sha256.Sum256(token)
	var found *Tenant
	for _, t := range s.Tenants {
		if subtle.ConstantTimeCompare(h[:], t.hash[:]) == 1 {
			found = t
		}
	}
	if found == nil && s.Lookup != nil {
		t, err := s.Lookup(h)
		if err != nil {
			return nil, nil, &refusal{cudaNotPermitted, err.Error()}
		}
		found = t
	}
	if found != nil {
		return found, secret, nil
	}
	if !s.guesses.allowed(network, now) {
		return nil, nil, rationed()
	}
	s.guesses.wrong(network, now)
	return nil, nil, &refusal{cudaNotPermitted, "wrong token: no tenant of this server has it"}
}

// tokenOf reads u8 present, u64 n, n bytes, which must end the frame.
func tokenOf(b []byte) ([]byte, bool) {
	if len(b) == 1 && b[0] == 0 {
		return nil, true
	}
	if len(b) < 9 || b[0] != 1 {
		return nil, false
	}
	n := binary.LittleEndian.Uint64(b[1:])
	if n == 0 || n > MaxToken || n != uint64(len(b)-9) {
		return nil, false
	}
	return b[9:], true
}

func (s *Server) readError(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &limited{&s.silentLog, fmt.Errorf("no authentication within %v", AuthTimeout)}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the connection closed during authentication")
	}
	return err
}

func authReply(result uint32, msg string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0)
	b = binary.LittleEndian.AppendUint32(b, result)
	b = append(b, 1)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(msg)+1))
	b = append(append(b, msg...), 0)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}
