package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// checkAccounting holds the remoting client to the whole driver API: every
// function of api/cuda13.names (CUDA 13.0's headers, each as the variant
// they declare by default, by the version of its PFN_ typedef) must be an
// entry of the spec at that version (typedef=V where the spec resolves it
// at another) — carried, answered by the client or refused with its
// reason — so that cuGetProcAddress and the dynamic linker find every name.
func checkAccounting(path string, entries []RemoteEntry) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	have := map[string]int{}
	for _, e := range entries {
		if e.Table == nil {
			have[e.Name] = e.Version
			if v, err := strconv.Atoi(e.Typedef); err == nil {
				have[e.Name] = v // the version the headers' typedef names
			}
		}
	}
	var missing []string
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		v, err := strconv.Atoi(fs[0])
		if len(fs) != 2 || err != nil {
			return fmt.Errorf("%s:%d: want VERSION NAME, got %q", path, ln, line)
		}
		got, ok := have[fs[1]]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("%s (%d)", fs[1], v))
		case got != v:
			return fmt.Errorf("%s:%d: %s is at %d in the spec, %d in the driver's headers", path, ln, fs[1], got, v)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: neither carried, answered nor refused in api/remote.api (give each a disposition, "+
			"or VERSION NAME unsupported \"WHY\"): %s", path, strings.Join(missing, ", "))
	}
	return nil
}

// checkPerThread fails when a name's newest per-thread variant is older
// than its newest default-stream one: cuGetProcAddress asked with the
// per-thread flag hands out the newest per-thread variant, so the program
// would be given the older ABI.
func checkPerThread(entries []RemoteEntry) error {
	newest := map[string][2]int{} // base: newest default-stream, newest per-thread
	for _, e := range entries {
		if e.Table != nil {
			continue
		}
		v := newest[e.Base()]
		k := 0
		if e.PerThread() != "" {
			k = 1
		}
		if e.Version > v[k] {
			v[k] = e.Version
		}
		newest[e.Base()] = v
	}
	var bad []string
	for base, v := range newest {
		if v[1] != 0 && v[1] < v[0] {
			bad = append(bad, fmt.Sprintf("%s (per-thread %d, default stream %d)", base, v[1], v[0]))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("the per-thread variants of these are older than their newest ABI; add the per-thread "+
			"variant of that version: %s", strings.Join(bad, ", "))
	}
	return nil
}
