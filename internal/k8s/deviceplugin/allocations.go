package deviceplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// allocTTL is how long an allocation waits for its container's start
// before it is forgotten: a kubelet starts a container seconds after
// allocating, and retries with a new allocation.
const allocTTL = 10 * time.Minute

// allocation is the pod (namespace/name) an allocation was made for.
type allocation struct {
	Pod string    `json:"pod"`
	At  time.Time `json:"at"`
}

// loadAllocations reads the allocations a previous run of the plugin left
// in path, if it is this user's file: one made by anyone else is not
// believed. What is missing or damaged is an empty set, said on log.
func loadAllocations(path string, now time.Time, log func(string, ...any)) map[string]allocation {
	out := map[string]allocation{}
	if path == "" {
		return out
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if os.IsNotExist(err) {
		return out
	}
	if err != nil {
		log("allocations of a previous run, %s: %v; their containers start unchecked", path, err)
		return out
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
		log("allocations of a previous run, %s: not a file this user wrote; ignored", path)
		return out
	}
	data, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil || json.Unmarshal(data, &out) != nil {
		log("allocations of a previous run, %s: damaged; their containers start unchecked", path)
		return map[string]allocation{}
	}
	for k, a := range out {
		if now.Sub(a.At) > allocTTL {
			delete(out, k)
		}
	}
	return out
}

// saveAllocations writes allocs to path aside and renames it into place,
// so that it is whole whenever the daemon dies.
func saveAllocations(path string, allocs map[string]allocation) error {
	if path == "" {
		return nil
	}
	data, _ := json.Marshal(allocs)
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("saving allocations: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("saving allocations: %w", err)
	}
	return nil
}
