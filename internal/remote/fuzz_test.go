package remote

import (
	"strings"
	"testing"
	"unicode"
)

// Whatever an unauthenticated peer sends first, the server never panics
// or hangs (net.Pipe: a frame cut short ends at the hang-up), answers with
// a well-formed reply when it answers at all, and admits a tenant only for
// a frame that carries exactly that tenant's token (and the next request's
// bytes after it).
func FuzzAuthenticate(f *testing.F) {
	f.Add(authFrame(AuthMagic, ProtoVersion, "token-of-tenant-a"))
	f.Add(authFrame(AuthMagic, ProtoVersion, ""))
	f.Add(authFrame(ChannelMagic, ProtoVersion, strings.Repeat("s", SecretLen)+"token-of-tenant-a"))
	f.Add(authFrame(AuthMagic, ProtoVersion+1, "token-of-tenant-a"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	tok := []byte("token-of-tenant-a")
	f.Fuzz(func(t *testing.T, frame []byte) {
		s := &Server{Tenants: []*Tenant{NewTenant("a", tok, nil)}}
		got, err, result, msg := authOver(s, frame, true)
		if got != nil {
			if err != nil || got.Name != "a" || result != 0 || msg != "a" {
				t.Fatalf("admitted %q with %v, answered %d %q", frame, err, result, msg)
			}
			// What follows the frame is the connection's next request.
			if want := authFrame(AuthMagic, ProtoVersion, string(tok)); !strings.HasPrefix(string(frame), string(want)) {
				t.Fatalf("admitted a frame other than the token's: %q", frame)
			}
			return
		}
		if err == nil {
			t.Fatalf("%q: no tenant and no error", frame)
		}
		if result != 0xffffffff && (result == 0 || msg != err.Error()) {
			t.Fatalf("%q refused (%v) with answer %d %q", frame, err, result, msg)
		}
	})
}

// An executor's control line reaches the server's log and flexgv migrate's
// output: whatever it writes, an answer taken carries no control character
// (no terminal escape), and a move names an address and a pause.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{"moved unix:///run/b.sock 12", "moved tcp://10.0.0.2:7070 0", "stayed no room on the target",
		"stayed \x1b[2J\x9b31m", "stayed a\u009b31m", "moved unix:///a\u009b31m 5", "moved unix:///a\x1b 5", "stayed", "moved  1", "bogus"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		a, err := parseAnswer(line)
		if err != nil {
			return
		}
		for _, s := range []string{a.addr, a.reason} {
			if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
				t.Fatalf("%q taken as %+v: a control character at %d", line, a, i)
			}
		}
		if a.moved {
			if _, err := ParseAddr(a.addr); err != nil || a.millis < 0 {
				t.Fatalf("%q taken as %+v (%v)", line, a, err)
			}
		} else if a.reason == "" {
			t.Fatalf("%q taken with no reason", line)
		}
	})
}
