package e2e

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dialServer opens a raw connection to s, over TCP from local (nil: any).
func dialServer(t *testing.T, s *server, local net.Addr) net.Conn {
	t.Helper()
	network, addr, _ := strings.Cut(s.addr, "://")
	if network != "unix" {
		network = "tcp"
	}
	d := net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
	c, err := d.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// answer sends an authentication frame on c and reads the server's answer:
// its CUresult and message (0xffffffff when closed without one).
func answer(c net.Conn, frame []byte) (uint32, string) {
	defer c.Close()
	c.Write(frame)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	reply, _ := io.ReadAll(c)
	if len(reply) < 17 {
		return 0xffffffff, ""
	}
	return binary.LittleEndian.Uint32(reply[4:]), strings.TrimRight(string(reply[17:]), "\x00")
}

// 300 connections that never authenticate, held open from the tenant's own
// network (the same user on a unix socket, loopback over TCP), do not keep
// a tenant with its token out: a network's oldest silent connections are
// closed to make room, and the closures are logged a few at a time. The
// server may open 128 files: held open, the 300 would take all it has.
func TestRemoteSilentPeersLockOutOnlyThemselves(t *testing.T) {
	for _, transport := range []string{"unix", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			e := quotaEnv(t)
			tok := e.token("a-" + transport)
			s := e.serve(transport, "--tenant", "a:"+tok, "--mem", "1GiB")
			if err := unix.Prlimit(s.cmd.Process.Pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 128, Max: 128}, nil); err != nil {
				t.Fatal(err)
			}
			var held []net.Conn
			for i := 0; i < 300; i++ {
				held = append(held, dialServer(t, s, nil))
			}
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			// Served at once: the mechanism, not the clock, guarantees it;
			// the bound is only against a hang.
			start := time.Now()
			if r := e.remoteAs(s, tok, "direct"); r.code != 0 {
				t.Fatalf("the tenant beside 300 silent connections: exit %d\n%s\n%s", r.code, r.stderr, s.Log())
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("the tenant was served after %v", d)
			}
			s.waitLog(`closed a connection that had not authenticated: (uid 0|loopback) holds 32 of the 256`, 10*time.Second)
			if n := strings.Count(s.Log(), "closed a connection that had not authenticated"); n > 10 {
				t.Errorf("%d closures logged one by one: the log floods\n%s", n, s.Log())
			}
		})
	}
}

// A tenant holds at most --max-conns-per-tenant connections: one more is
// refused, its program saying why, and the server says it once; another
// tenant is served meanwhile, and a connection that ends gives its room
// back.
func TestRemoteTenantConnectionCap(t *testing.T) {
	e := quotaEnv(t)
	ta, tb := e.token("a"), e.token("b")
	s := e.serve("unix", "--max-conns-per-tenant", "2", "--tenant", "a:"+ta, "--mem", "1GiB", "--tenant", "b:"+tb, "--mem", "1GiB")
	good, _ := os.ReadFile(ta)
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c := dialServer(t, s, nil)
		c.Write(auth(strings.TrimSpace(string(good))))
		reply := make([]byte, 17)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadFull(c, reply); err != nil || binary.LittleEndian.Uint32(reply[4:]) != 0 {
			t.Fatalf("connection %d of tenant a: %q %v", i+1, reply, err)
		}
		held = append(held, c)
	}
	for i := 0; i < 3; i++ {
		r := e.remoteAs(s, ta, "direct")
		if r.code != 1 || !strings.Contains(r.stderr, "refused the connection: tenant a has 2 connections, its cap (flexgv serve --max-conns-per-tenant 2)") {
			t.Fatalf("tenant a over its cap: exit %d\n%s", r.code, r.stderr)
		}
	}
	if n := strings.Count(s.Log(), "tenant a has 2 connections"); n != 1 {
		t.Errorf("the cap said %d times for 3 refusals, want once:\n%s", n, s.Log())
	}
	if r := e.remoteAs(s, tb, "direct"); r.code != 0 {
		t.Errorf("tenant b beside a at its cap: exit %d\n%s", r.code, r.stderr)
	}
	held[0].Close()
	s.waitLog(`\(tenant a\): executor pid \d+ ended`, 20*time.Second)
	if r := e.remoteAs(s, ta, "direct"); r.code != 0 {
		t.Errorf("tenant a once a connection ended: exit %d\n%s", r.code, r.stderr)
	}
	held[1].Close()
	for _, bad := range []string{"0", "-1", "x", "2.5", "9999999999"} {
		r := e.run("flexgv", "serve", "--listen", "unix://"+e.dir+"/x.sock", "--max-conns-per-tenant", bad, "--tenant", "a:"+ta)
		if r.code != 2 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 ||
			!strings.Contains(r.stderr, "--max-conns-per-tenant: \""+bad+"\" is not a number of connections") {
			t.Errorf("--max-conns-per-tenant %s: exit %d %q", bad, r.code, r.stderr)
		}
	}
}

// 1000 wrong tokens from 50 loopback addresses are rationed as one
// network's: past the first 20 (and one per 3 s since) they are refused
// as rationed, and so logged a few at a time; the tenant is still served
// from that network.
func TestRemoteGuessesRationedAcrossAddresses(t *testing.T) {
	e := quotaEnv(t)
	tok := e.token("a")
	s := e.serve("tcp", "--tenant", "a:"+tok, "--mem", "1GiB")
	wrong := auth("0123456789abcdef0123456789abcdef")
	var mu sync.Mutex
	counts := map[string]int{}
	start := time.Now()
	var wg sync.WaitGroup
	// Ten at a time: fewer than a network may hold authenticating.
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(w*5+i%5+1))}
				r, msg := answer(dialServer(t, s, local), wrong)
				kind := "other: " + msg
				switch {
				case r == 800 && strings.HasPrefix(msg, "wrong token"):
					kind = "wrong"
				case r == 800 && strings.HasPrefix(msg, "too many wrong tokens from loopback"):
					kind = "rationed"
				}
				mu.Lock()
				counts[kind]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if max := 20 + int(took/(3*time.Second)) + 1; counts["wrong"] > max || counts["wrong"]+counts["rationed"] != 1000 {
		t.Errorf("1000 guesses in %v from 50 addresses: %v, want at most %d looked at, the rest rationed", took, counts, max)
	}
	if r := e.remoteAs(s, tok, "direct"); r.code != 0 {
		t.Errorf("the tenant from the rationed network: exit %d\n%s", r.code, r.stderr)
	}
	if n := strings.Count(s.Log(), "refused: too many wrong tokens"); n > 10 {
		t.Errorf("%d rationed refusals logged one by one: the log floods", n)
	}
}
