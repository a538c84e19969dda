// Command gen generates the hook wrappers, prototypes, the simulated GPU's
// entry point table, the Go API list and the GPU-side declaration check from
// api/cuda.api and api/nvml.api. Run from the repository root:
//
//	go run ./tools/gen
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// generate returns every generated file, keyed by its path from the root.
func generate(root string) (map[string][]byte, error) {
	cuda, err := parseAPI(filepath.Join(root, "api/cuda.api"), LibCUDA)
	if err != nil {
		return nil, err
	}
	nvml, err := parseAPI(filepath.Join(root, "api/nvml.api"), LibNVML)
	if err != nil {
		return nil, err
	}
	all := append(cuda, nvml...)
	seen := map[string]bool{}
	for _, e := range all {
		if seen[e.Name] {
			return nil, fmt.Errorf("%s is listed twice", e.Name)
		}
		seen[e.Name] = true
	}
	header, err := os.ReadFile(filepath.Join(root, "include/flexgv/cuda_types.h"))
	if err != nil {
		return nil, err
	}
	results, err := os.ReadFile(filepath.Join(root, "include/flexgv/cuda_results.def"))
	if err != nil {
		return nil, err
	}
	wrappers, err := emitWrappers(all)
	if err != nil {
		return nil, err
	}
	computeHooks, err := emitComputeHooks(all)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"include/flexgv/api_ids_gen.h": []byte(emitIDs(all)),
		"shim/hooks_gen.c":             []byte(wrappers),
		"shim/hooks_gen.h":             []byte(emitShimHeader(all)),
		"shim/compute_gen.inc":         []byte(computeHooks),
		"internal/api/api_gen.go":      []byte(emitGoAPI(all)),
		"scripts/gpu/declcheck_gen.c":  []byte(emitDeclCheck(all, false, "api/cuda.api")),
		"tests/clients/variants_gen.h": []byte(emitVariants(all)),
		"scripts/gpu/typecheck_gen.c":  []byte(emitTypeCheck(string(header), string(results))),
	}
	remote, tables, err := parseRemote(filepath.Join(root, "api/remote.api"), cudaOnly(cuda))
	if err != nil {
		return nil, err
	}
	if err := checkAccounting(filepath.Join(root, "api/cuda13.names"), remote); err != nil {
		return nil, err
	}
	if err := checkPerThread(remote); err != nil {
		return nil, err
	}
	files["simgpu/procs_gen.c"] = []byte(emitSimTable(all, remote))
	files["remote/proto_gen.h"] = []byte(emitRemoteProto(remote))
	files["remote/client/stubs_gen.c"] = []byte(emitRemoteClient(remote, tables))
	files["remote/client/exports_gen.h"] = []byte(emitClientExports(tables))
	files["remote/executor/dispatch_gen.c"] = []byte(emitRemoteServer(remote, tables))
	files["docs/REMOTE-SUPPORT.md"] = []byte(emitRemoteDoc(remote, tables))
	var extras []Entry
	for _, e := range remote {
		if e.Extra && !e.Bare && strings.HasPrefix(e.Name, "cu") { // (our own operations have no driver typedef)
			extras = append(extras, e.Entry)
		}
	}
	// Old ABIs given in api/remote.api are checked with the hooked ones'.
	files["scripts/gpu/declcheck_legacy_gen.c"] = []byte(emitDeclCheck(append(append([]Entry{}, all...), extras...), true,
		"api/cuda.api or api/remote.api"))
	files["include/flexgv/cuda_api_gen.h"] = []byte(emitCUDAProtos(all, extras))
	files["scripts/gpu/declcheck_remote_gen.c"] = []byte(emitDeclCheck(extras, false, "api/remote.api"))
	for _, l := range layouts {
		files[l.CHeader] = []byte(emitLayoutC(l))
		files[l.GoFile] = []byte(emitLayoutGo(l))
		if l.PyFile != "" {
			files[l.PyFile] = []byte(emitLayoutPy(l))
		}
	}
	for p, src := range files {
		if filepath.Ext(p) == ".go" {
			out, err := format.Source(src)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", p, err)
			}
			files[p] = out
		}
	}
	return files, nil
}

func main() {
	check := flag.Bool("check", false, "only report generated files that are out of date")
	flag.Parse()
	files, err := generate(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	var paths []string
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	stale := 0
	for _, p := range paths {
		old, _ := os.ReadFile(p)
		if bytes.Equal(old, files[p]) {
			continue
		}
		if *check {
			fmt.Fprintf(os.Stderr, "gen: %s is out of date; run go run ./tools/gen\n", p)
			stale++
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(p, files[p], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
	if stale > 0 {
		os.Exit(1)
	}
}
