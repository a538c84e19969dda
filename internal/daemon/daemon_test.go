package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

// syncBuffer is a log several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The daemon serves its socket until its context ends, refuses a second
// one, and leaves no socket behind.
func TestRunServesUntilStopped(t *testing.T) {
	dir := t.TempDir()
	var logs syncBuffer
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Config{StateDir: dir, Log: &logs}) }()
	defer stop()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "serving on"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon never served: %s", logs.String())
		}
	}
	c, err := Connect(Socket(dir))
	if err != nil || c == nil {
		t.Fatalf("connect: %v %v", c, err)
	}
	defer c.Close()
	call, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	list, err := c.ListTenants(call, &flexgvv1.ListTenantsRequest{})
	if err != nil || list.StateDir != dir || len(list.Tenants) != 0 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if st, err := os.Stat(Socket(dir)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v", st, err)
	}

	err = Run(context.Background(), Config{StateDir: dir, Log: &logs})
	if err == nil || err.Error() != "another flexgv daemon answers on "+Socket(dir) {
		t.Fatalf("second daemon: %v", err)
	}
	err = Run(context.Background(), Config{StateDir: dir, Socket: filepath.Join(t.TempDir(), "other.sock"), Log: &logs})
	if err == nil || err.Error() != "another flexgv daemon keeps the tenants of "+dir {
		t.Fatalf("second daemon on another socket: %v", err)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatalf("stopped daemon: %v", err)
	}
	if _, err := os.Lstat(Socket(dir)); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	if _, err := c.ListTenants(call, &flexgvv1.ListTenantsRequest{}); !Absent(err) {
		t.Fatalf("call to the stopped daemon: %v", err)
	}
}
