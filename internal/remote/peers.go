package remote

import (
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Connections that have not authenticated yet are bounded per network and
// in all: a peer that opens many and says nothing closes its own oldest
// ones, never another network's, and a client that authenticates at once
// always gets through.
const (
	// DefaultMaxPending is how many connections may be authenticating at once.
	DefaultMaxPending = 256
	// maxPendingPerNet is how many of them one network may hold.
	maxPendingPerNet = 32
)

// netKey is the network a peer's pending connections and wrong tokens
// count against: an IPv4 /24, an IPv6 /64, all of loopback as one, and on
// a unix socket the peer's user.
func netKey(c net.Conn) string {
	if uc, ok := c.(*net.UnixConn); ok {
		if raw, err := uc.SyscallConn(); err == nil {
			var cred *unix.Ucred
			raw.Control(func(fd uintptr) { cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
			if cred != nil {
				return fmt.Sprintf("uid %d", cred.Uid)
			}
		}
	}
	return netOf(c.RemoteAddr())
}

// netOf is netKey by address alone ("local" for a unix socket).
func netOf(a net.Addr) string {
	var ip net.IP
	switch a := a.(type) {
	case *net.TCPAddr:
		ip = a.IP
	case nil:
		return "local"
	default:
		if host, _, err := net.SplitHostPort(a.String()); err == nil {
			ip = net.ParseIP(host)
		}
	}
	switch {
	case ip == nil:
		return "local"
	case ip.IsLoopback():
		return "loopback"
	case ip.To4() != nil:
		return ip.Mask(net.CIDRMask(24, 32)).String() + "/24"
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// pendingConn is a connection authenticating; closed is set when it was
// closed to make room.
type pendingConn struct {
	c      net.Conn
	closed bool
}

type pendingConns struct {
	mu    sync.Mutex
	byNet map[string][]*pendingConn // oldest first
	n     int
}

// add counts c against network key; when key holds perNet already, or the
// server max, the oldest of key's (or of the network holding most) is
// closed and returned with the network it was of and how many that held.
func (p *pendingConns) add(key string, c net.Conn, perNet, max int) (me, closed *pendingConn, of string, held int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byNet == nil {
		p.byNet = map[string][]*pendingConn{}
	}
	of = key
	if len(p.byNet[key]) < perNet && p.n >= max {
		for k, l := range p.byNet {
			if len(l) > len(p.byNet[of]) {
				of = k
			}
		}
	}
	if l := p.byNet[of]; len(l) > 0 && (len(p.byNet[key]) >= perNet || p.n >= max) {
		closed, held = l[0], len(l)
		closed.closed = true
		p.drop(of, closed)
		closed.c.Close()
	}
	me = &pendingConn{c: c}
	p.byNet[key] = append(p.byNet[key], me)
	p.n++
	return me, closed, of, held
}

// done ends pc's count: it authenticated, failed, or was closed.
func (p *pendingConns) done(key string, pc *pendingConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop(key, pc)
}

func (p *pendingConns) drop(key string, pc *pendingConn) {
	l := p.byNet[key]
	for i, x := range l {
		if x == pc {
			l = append(l[:i], l[i+1:]...)
			p.n--
			break
		}
	}
	if len(l) == 0 {
		delete(p.byNet, key)
	} else {
		p.byNet[key] = l
	}
}

func (p *pendingConns) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// logLimit keeps a kind of line that peers can cause at will from flooding
// the log: logBurst lines a logEvery, then one saying how many were left
// out.
type logLimit struct {
	mu      sync.Mutex
	at      time.Time
	lines   int
	skipped int
}

const (
	logBurst = 5
	logEvery = 10 * time.Second
)

func (s *Server) limitedf(l *logLimit, format string, args ...any) {
	now := time.Now()
	l.mu.Lock()
	if now.Sub(l.at) >= logEvery {
		if l.skipped > 0 {
			s.logf("%d more lines like the next were left out in %v", l.skipped, now.Sub(l.at).Round(time.Second))
		}
		l.at, l.lines, l.skipped = now, 0, 0
	}
	ok := l.lines < logBurst
	if ok {
		l.lines++
	} else {
		l.skipped++
	}
	l.mu.Unlock()
	if ok {
		s.logf(format, args...)
	}
}
