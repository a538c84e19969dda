package launch

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestEnvironPreloadsShimFirst(t *testing.T) {
	env := []string{"PATH=/bin", "LD_PRELOAD=/x/other.so:/s/libflexgv.so /y/third.so", "FLEXGV_DRIVER=/old"}
	got := Environ(env, "/s/libflexgv.so", Options{Driver: "/d/libcuda.so.1", Env: []string{"FLEXGV_LOG=1"}})
	want := []string{"PATH=/bin", "LD_PRELOAD=/s/libflexgv.so:/x/other.so:/y/third.so", "FLEXGV_DRIVER=/d/libcuda.so.1", "FLEXGV_LOG=1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Environ = %q\nwant %q", got, want)
	}
}

func TestFindShimErrors(t *testing.T) {
	if _, err := FindShim("/no/such/libflexgv.so"); err == nil || !strings.Contains(err.Error(), "/no/such/libflexgv.so") {
		t.Fatalf("FindShim of a missing file: %v", err)
	}
	p := filepath.Join(t.TempDir(), "libflexgv.so")
	os.WriteFile(p, nil, 0o644)
	if got, err := FindShim(p); err != nil || got != p {
		t.Fatalf("FindShim(%s) = %s, %v", p, got, err)
	}
}

func TestFindDriverUsesLibraryPath(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "libcuda.so.1"), nil, 0o644)
	got := FindDriver([]string{"LD_LIBRARY_PATH=/nonexistent:" + dir})
	if got == "" {
		t.Fatal("driver on LD_LIBRARY_PATH not found")
	}
}

func TestRunRejectsEmptyCommandAndMissingDriver(t *testing.T) {
	if _, err := Run(nil, Options{}); err == nil {
		t.Fatal("Run with no command succeeded")
	}
	shim := filepath.Join(t.TempDir(), "libflexgv.so")
	os.WriteFile(shim, nil, 0o644)
	code, err := Run([]string{"true"}, Options{Shim: shim, Driver: "/no/such/driver.so"})
	if err == nil || code != 2 || !strings.Contains(err.Error(), "--driver") {
		t.Fatalf("Run with a missing --driver = %d, %v", code, err)
	}
}
