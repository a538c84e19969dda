package remote

import (
	"net"
	"path/filepath"
	"testing"
)

func TestListeningUnix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	if listeningUnix(path) {
		t.Fatalf("%s listed before anyone listens", path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if !listeningUnix(path) {
		t.Errorf("%s not listed while listening", path)
	}
	if listeningUnix(path + "x") {
		t.Errorf("another path listed")
	}
	l.Close()
	if listeningUnix(path) {
		t.Errorf("%s listed after its listener closed", path)
	}
}
