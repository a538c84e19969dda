package main

import (
	"strings"
	"testing"
)

func TestCountsAndExitStatus(t *testing.T) {
	const pkg = `"Package":"github.com/flexgv/flexgv/x"`
	events := strings.Join([]string{
		`{"Action":"start",` + pkg + `}`,
		`{"Action":"pass",` + pkg + `,"Test":"TestA"}`,
		`{"Action":"pass",` + pkg + `,"Test":"TestA/sub"}`,
		`{"Action":"output",` + pkg + `,"Test":"TestB","Output":"why it broke\n"}`,
		`{"Action":"fail",` + pkg + `,"Test":"TestB"}`,
		`{"Action":"skip",` + pkg + `,"Test":"TestC"}`,
		`{"Action":"fail",` + pkg + `}`,
	}, "\n")
	var out strings.Builder
	if code := run(strings.NewReader(events), &out); code != 1 {
		t.Fatalf("exit %d with a failed test, want 1:\n%s", code, &out)
	}
	for _, want := range []string{"FAIL x TestB", "    why it broke", "tests: 1 passed, 1 failed, 1 skipped\n", "FAIL x\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, &out)
		}
	}

	out.Reset()
	passing := `{"Action":"start",` + pkg + `}` + "\n" + `{"Action":"pass",` + pkg + `,"Test":"TestA"}` + "\n" + `{"Action":"pass",` + pkg + `}`
	if code := run(strings.NewReader(passing), &out); code != 0 || !strings.Contains(out.String(), "tests: 1 passed, 0 failed, 0 skipped") {
		t.Fatalf("exit %d, want 0 and the count:\n%s", code, &out)
	}

	out.Reset()
	died := `{"Action":"start",` + pkg + `}` + "\n" + `{"Action":"output",` + pkg + `,"Test":"TestD","Output":"panic: boom\n"}` + "\n" + `{"Action":"fail",` + pkg + `}`
	if code := run(strings.NewReader(died), &out); code != 1 || !strings.Contains(out.String(), "TestD did not end") || !strings.Contains(out.String(), "panic: boom") {
		t.Fatalf("a test the binary died in: exit %d, want 1 and its output:\n%s", code, &out)
	}

	out.Reset()
	killed := `{"Action":"start",` + pkg + `}` + "\n" + `{"Action":"pass",` + pkg + `,"Test":"TestA"}`
	if code := run(strings.NewReader(killed), &out); code != 1 || !strings.Contains(out.String(), "no result") {
		t.Fatalf("a package without a result: exit %d, want 1:\n%s", code, &out)
	}
}
