package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Module images across a network are kept by the server, by SHA-256: a
// client over TCP sends a large image once (the server's file is named by
// the hash of its bytes); a later client is told it is kept and sends the
// hash, so the kept bytes are what its module is made of (shown by
// changing them on the server). Over a unix socket nothing is kept, nor
// with --module-cache off; a folder that cannot be made is refused.
func TestRemoteModuleImagesKept(t *testing.T) {
	long(t)
	e := newEnv(t, "FLEXGV_SIM_DEVICES=2")
	dir := filepath.Join(e.dir, "cache", "flexgv", "modules", "open")
	kept := func() []string {
		names, _ := filepath.Glob(filepath.Join(dir, "*"))
		return names
	}
	unix := e.serve("unix")
	if r := e.remote(unix, "blaslike"); r.code != 0 || len(kept()) != 0 {
		t.Fatalf("over a unix socket: exit %d, kept %v\n%s", r.code, kept(), r.stderr)
	}
	tcp := e.serve("tcp")
	const line = "a 100 KiB library with an option after it: "
	r := e.remote(tcp, "blaslike")
	if r.code != 0 || !strings.Contains(r.stdout, line+"CUDA_SUCCESS CUDA_SUCCESS\n") || len(kept()) != 1 {
		t.Fatalf("first client over TCP: exit %d, kept %v\n%s%s", r.code, kept(), r.stdout, r.stderr)
	}
	file := kept()[0]
	image, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(image)
	if filepath.Base(file) != hex.EncodeToString(sum[:]) || len(image) < 64<<10 || !bytes.HasPrefix(image, []byte("FLEXGV-SIM-MODULE\n")) {
		t.Fatalf("kept as %s: %d bytes, SHA-256 %x", filepath.Base(file), len(image), sum)
	}
	if info, _ := os.Stat(dir); info.Mode().Perm() != 0o700 {
		t.Errorf("the folder's mode is %v, want 0700", info.Mode().Perm())
	}
	// The kept bytes changed on the server: a later client gets them.
	if err := os.WriteFile(file, bytes.Replace(image, []byte("kernel last"), []byte("kernel lost"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	r = e.remote(tcp, "blaslike")
	if r.code != 0 || !strings.Contains(r.stdout, line+"CUDA_SUCCESS CUDA_ERROR_NOT_FOUND\n") {
		t.Errorf("a later client did not load the kept image: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Gone from the server after the handshake listed it: that load fails,
	// said by the executor; the client goes on.
	os.Remove(file)
	os.Remove(dir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(file)), image[:100], 0o600); err != nil {
		t.Fatal(err)
	}
	r = e.remote(tcp, "blaslike")
	if r.code != 0 || !strings.Contains(r.stdout, line+"CUDA_ERROR_INVALID_IMAGE CUDA_ERROR_INVALID_IMAGE\n") {
		t.Errorf("a kept image of the wrong size: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	tcp.waitLog("is not kept here", 10e9)

	// A folder holding as many images as a handshake lists keeps no more
	// (the client is told of them all; its own image goes whole).
	full := newEnv(t, "FLEXGV_SIM_DEVICES=2")
	fullDir := filepath.Join(full.dir, "cache", "flexgv", "modules", "open")
	if err := os.MkdirAll(fullDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 65536; i++ {
		h := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		if err := os.WriteFile(filepath.Join(fullDir, hex.EncodeToString(h[:])), []byte{1}, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fs := full.serve("tcp")
	if r := full.remote(fs, "blaslike"); r.code != 0 || !strings.Contains(r.stdout, line+"CUDA_SUCCESS CUDA_SUCCESS\n") {
		t.Fatalf("next to a full folder: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if names, _ := filepath.Glob(filepath.Join(fullDir, "*")); len(names) != 65536 {
		t.Errorf("a full folder holds %d images after a client, want 65536", len(names))
	}
	fs.waitLog("no more are kept", 10e9)

	off := newEnv(t, "FLEXGV_SIM_DEVICES=2")
	s := off.serve("tcp", "--module-cache", "off")
	if r := off.remote(s, "blaslike"); r.code != 0 {
		t.Fatalf("--module-cache off: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(off.dir, "cache", "flexgv")); err == nil {
		t.Errorf("--module-cache off made %s", filepath.Join(off.dir, "cache", "flexgv"))
	}
	bad := e.runIn("", "flexgv", "serve", "--listen", "unix://"+filepath.Join(e.dir, "x.sock"), "--module-cache", "/proc/none")
	if bad.code != 2 || !strings.Contains(bad.stderr, "flexgv serve: --module-cache: mkdir /proc/none") {
		t.Errorf("a folder that cannot be made: exit %d\n%s", bad.code, bad.stderr)
	}
}
