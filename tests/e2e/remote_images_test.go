package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// simImage is a module image of the simulated GPU of about n bytes, its
// kernels named after tag (so each tag's image has its own hash).
func simImage(tag string, n int) string {
	var b strings.Builder
	b.WriteString("FLEXGV-SIM-MODULE\n")
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "kernel %s_%d\n", tag, i)
	}
	return b.String() + "\x00"
}

// Module images are kept within --module-cache-max however many
// executors keep them at once (they count the folder's room one at a
// time), and only once the driver loaded them: an image whose load failed
// leaves nothing on disk.
func TestRemoteModuleCacheCapHeld(t *testing.T) {
	p := readProtocol(t)
	e := newEnv(t)
	cache := filepath.Join(e.dir, "modules")
	s := e.serve("unix", "--module-cache", cache, "--module-cache-max", "1MiB")
	dir := filepath.Join(cache, "open")
	load := func(c *wire, image string) uint32 {
		r, _ := c.call("cuModuleLoadData", w{}.u8(1).u8(2).u8(1).u64(uint64(len(image))).raw(image))
		return r
	}
	var conns []*wire
	for i := 0; i < 8; i++ {
		c := dialWire(t, p, s)
		c.setup(4096)
		conns = append(conns, c)
	}
	// Files that are not images, which counting the room reads past: it
	// takes long enough that executors that did not wait for each other's
	// count would overlap, each finding room for its image.
	for i := 0; i < 40000; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("other-%05d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([][]uint32, len(conns))
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for k := 0; k < 3; k++ {
				// One kernel and padding: the driver loads it at once.
				image := fmt.Sprintf("FLEXGV-SIM-MODULE\nkernel c%dm%d\n%s\x00", i, k, strings.Repeat("-", 100<<10))
				results[i] = append(results[i], load(c, image))
			}
		}()
	}
	close(start)
	wg.Wait()
	var total int64
	names, _ := filepath.Glob(filepath.Join(dir, "[0-9a-f]*"))
	for _, n := range names {
		st, err := os.Stat(n)
		if err != nil || strings.HasSuffix(n, ".tmp") {
			t.Errorf("%s left in the folder: %v", n, err)
			continue
		}
		total += st.Size()
	}
	if total > 1<<20 || len(names) == 0 {
		t.Errorf("24 images of 100 KiB loaded at once by 8 executors: %d kept, %d bytes; want some, at most 1 MiB\n%v", len(names), total, results)
	}
	for i, r := range results {
		for k, v := range r {
			if v != 0 {
				t.Errorf("load %d of executor %d: error %d", k, i, v)
			}
		}
	}
	s.waitLog(`holds 65536 images or 1048576 bytes: no more are kept`, 10*time.Second)

	// An image the driver refuses is not kept. (The folder made anew is
	// the executors' user's, as the server makes it.)
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(dir)
	os.Mkdir(dir, 0o700)
	os.Chown(dir, int(st.Sys().(*syscall.Stat_t).Uid), int(st.Sys().(*syscall.Stat_t).Gid))
	garbage := "not a module at all " + strings.Repeat("x", 100<<10) + "\x00"
	if r := load(conns[0], garbage); r != 200 { // CUDA_ERROR_INVALID_IMAGE
		t.Errorf("a garbage image: error %d, want 200", r)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 0 {
		t.Errorf("a failed load left %v on disk", names)
	}
	if r := load(conns[0], simImage("good", 100<<10)); r != 0 {
		t.Errorf("a good image after it: error %d", r)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 1 {
		t.Errorf("a loaded image kept as %v, want one file", names)
	}
	// The room is counted with the folder locked: while another holds the
	// lock, an image waits to be kept; a partial file a writer killed
	// midway left is removed, not counted.
	os.WriteFile(filepath.Join(dir, strings.Repeat("ab", 32)+".99.tmp"), make([]byte, 1<<20), 0o600)
	lock, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan uint32, 1)
	go func() { done <- load(conns[1], simImage("locked", 100<<10)) }()
	select {
	case r := <-done:
		t.Errorf("an image was kept (answered %d) while the folder was locked", r)
		unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	case <-time.After(500 * time.Millisecond):
		unix.Flock(int(lock.Fd()), unix.LOCK_UN)
		if r := <-done; r != 0 {
			t.Errorf("the load once the folder was unlocked: error %d", r)
		}
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 2 || slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, ".tmp") }) {
		t.Errorf("after the lock: %v, want two images and no partial file", names)
	}
	for _, bad := range []string{"0", "x", "-1MiB"} {
		r := e.run("flexgv", "serve", "--listen", "unix://"+e.dir+"/y.sock", "--module-cache-max", bad)
		if r.code != 2 || !strings.Contains(r.stderr, "--module-cache-max: \""+bad+"\" is not a size") {
			t.Errorf("--module-cache-max %s: exit %d %q", bad, r.code, r.stderr)
		}
	}
}

// A module, library or link input named by a file the program cannot
// read is refused as the driver refuses it. The client reads the file
// itself; one that was not there freed what it never allocated and
// aborted the program ("double free or corruption": CuPy's
// test_module_load_failure over shm://).
func TestRemoteModuleFileNotFound(t *testing.T) {
	prog := pyContext + `
h = ctypes.c_void_p()
for path in (b"/nonexistent/k.cubin", os.path.join(os.getcwd(), "k.cubin").encode()):
    print("module", cu.cuModuleLoad(ctypes.byref(h), path),
          "library", cu.cuLibraryLoadFromFile(ctypes.byref(h), path, None, None, 0, None, None, 0), flush=True)
`
	e := newEnv(t)
	local := e.run("python3", "-c", prog)
	if local.code != 0 || strings.Count(local.stdout, "module 301 library 301\n") != 2 {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	unix := e.serve("unix")
	for _, addr := range []string{unix.addr, strings.Replace(unix.addr, "unix://", "shm://", 1)} {
		r := e.remote(&server{addr: addr}, "python3", "-c", prog)
		if r.code != 0 || r.stdout != local.stdout {
			t.Errorf("over %s: exit %d\n%s\nlocally\n%s\n%s", addr, r.code, r.stdout, local.stdout, r.stderr)
		}
	}
}
