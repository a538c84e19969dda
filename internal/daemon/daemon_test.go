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

// Config.With runs in the daemon over its API, sees what the socket's
// clients see, and the daemon waits for it to end, with its tenants still
// held, before it stops.
func TestWithRunsBesideTheAPI(t *testing.T) {
	dir := t.TempDir()
	var logs syncBuffer
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	created := make(chan error, 1)
	release := make(chan struct{})
	var heldAtEnd []string
	with := func(ctx context.Context, api flexgvv1.DaemonServer) {
		_, err := api.CreateTenant(ctx, &flexgvv1.CreateTenantRequest{Name: "pod-a", Memory: "1GiB", ContextBytes: 512 << 20})
		created <- err
		<-ctx.Done()
		<-release
		list, err := api.ListTenants(context.Background(), &flexgvv1.ListTenantsRequest{})
		if err == nil {
			for _, tn := range list.Tenants {
				if tn.Held {
					heldAtEnd = append(heldAtEnd, tn.Name)
				}
			}
		}
	}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Config{StateDir: dir, Log: &logs, With: with}) }()
	if err := <-created; err != nil {
		t.Fatalf("CreateTenant from With: %v", err)
	}
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
	if tn, err := c.GetTenant(call, &flexgvv1.GetTenantRequest{Name: "pod-a"}); err != nil || !tn.Held {
		t.Fatalf("the tenant With created, through the socket: %+v %v", tn, err)
	}

	stop()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while With still ran", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("stopped daemon: %v", err)
	}
	if len(heldAtEnd) != 1 || heldAtEnd[0] != "pod-a" {
		t.Errorf("tenants held when With ended: %v, want [pod-a]", heldAtEnd)
	}
}
