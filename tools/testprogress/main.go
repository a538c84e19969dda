// Command testprogress shows go test -json as it runs: a line per test as
// it ends, a package's own output (a TestMain's progress) as it comes, and
// the whole output of a test that fails. Its exit status is 1 when a test
// or package failed, when the input ended without a package's result, or
// when it had none at all.
//
//	go test -json ./... | go run ./tools/testprogress
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // of a build's events
	Test       string
	Elapsed    float64
	Output     string
}

func main() { os.Exit(run(os.Stdin, os.Stdout)) }

func run(stdin io.Reader, stdout io.Writer) int {
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	logs := map[string][]string{} // a running test's output, by package and test
	open := map[string]bool{}     // packages without a result yet
	results := 0
	failed := false
	var passed, failedTests, skipped int // top-level tests
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	for in.Scan() {
		var e event
		if err := json.Unmarshal(in.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(out, in.Text()) // not JSON: go's own messages
			out.Flush()
			continue
		}
		if e.Package == "" {
			e.Package = e.ImportPath
		}
		pkg := strings.TrimPrefix(e.Package, "github.com/flexgv/flexgv/")
		key := e.Package + " " + e.Test
		switch {
		case e.Action == "start":
			open[e.Package] = true
		case e.Action == "output" && e.Test != "":
			logs[key] = append(logs[key], e.Output)
		case e.Action == "output" || e.Action == "build-output":
			// A package's own lines; its final ok/FAIL/PASS lines come
			// as its result below.
			if s := strings.TrimSpace(e.Output); s != "PASS" && s != "FAIL" && !strings.HasPrefix(s, "ok ") &&
				!strings.HasPrefix(s, "FAIL\t") && !strings.HasPrefix(s, "?") && !strings.HasPrefix(s, "coverage:") {
				fmt.Fprintf(out, "%s: %s", pkg, e.Output)
			}
		case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			if !strings.Contains(e.Test, "/") || e.Action == "fail" {
				fmt.Fprintf(out, "%-4s %s %s (%.1fs)\n", strings.ToUpper(e.Action), pkg, e.Test, e.Elapsed)
			}
			if !strings.Contains(e.Test, "/") {
				switch e.Action {
				case "pass":
					passed++
				case "fail":
					failedTests++
				default:
					skipped++
				}
			}
			if e.Action == "fail" {
				failed = true
				for _, l := range logs[key] {
					fmt.Fprint(out, "    ", l)
				}
			}
			delete(logs, key)
		case e.Action == "pass" || e.Action == "skip":
			delete(open, e.Package)
			results++
			if e.Action == "pass" {
				fmt.Fprintf(out, "ok   %s (%.1fs)\n", pkg, e.Elapsed)
			}
		case e.Action == "fail" || e.Action == "build-fail":
			delete(open, e.Package)
			results++
			failed = true
			fmt.Fprintf(out, "FAIL %s\n", pkg)
			// Tests that never ended (the binary died or timed out
			// in them): their output says why.
			for k, lines := range logs {
				if strings.HasPrefix(k, e.Package+" ") {
					fmt.Fprintf(out, "     %s did not end:\n", strings.TrimPrefix(k, e.Package+" "))
					for _, l := range lines {
						fmt.Fprint(out, "    ", l)
					}
					delete(logs, k)
				}
			}
		}
		out.Flush()
	}
	for p := range open {
		failed = true
		fmt.Fprintf(out, "FAIL %s: no result (the test binary was killed or go test stopped)\n", p)
	}
	if results == 0 {
		failed = true
		fmt.Fprintln(out, "no test results (go test failed before testing?)")
	}
	fmt.Fprintf(out, "tests: %d passed, %d failed, %d skipped\n", passed, failedTests, skipped)
	if failed {
		fmt.Fprintln(out, "FAIL")
		return 1
	}
	return 0
}
