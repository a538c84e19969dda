// Package docs checks that the documentation's relative links lead
// somewhere: every file they name exists, and every #anchor is a heading of
// the file it points into.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The documents a reader follows links through, from the repository root.
func documents(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"README.md", "CONTRIBUTING.md", filepath.Join("tests", "data", "README.md")} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			docs = append(docs, filepath.Join(root, f))
		}
	}
	return docs
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`[^`]*`")
	link       = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	notInSlug  = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
)

// links returns the relative link targets of a markdown text, with their
// line numbers; code blocks and inline code hold no links.
func links(text string) (targets []string, lines []int) {
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range link.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			targets = append(targets, target)
			lines = append(lines, i+1)
		}
	}
	return targets, lines
}

// anchors returns the anchors GitHub gives a markdown text's headings:
// lower case, punctuation dropped, spaces as hyphens, repeats numbered.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		m := heading.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		slug := strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// broken returns a line per relative link of file that leads nowhere.
func broken(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var bad []string
	targets, lines := links(string(b))
	for i, target := range targets {
		path, anchor, _ := strings.Cut(target, "#")
		dest := file
		if path != "" {
			dest = filepath.Join(filepath.Dir(file), path)
		}
		st, err := os.Stat(dest)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s:%d: %s: no such file", file, lines[i], target))
			continue
		}
		if anchor == "" {
			continue
		}
		if st.IsDir() || !strings.HasSuffix(dest, ".md") {
			bad = append(bad, fmt.Sprintf("%s:%d: %s: an anchor into a file that is not markdown", file, lines[i], target))
			continue
		}
		text, err := os.ReadFile(dest)
		if err != nil {
			return nil, err
		}
		if !anchors(string(text))[anchor] {
			bad = append(bad, fmt.Sprintf("%s:%d: %s: no heading #%s in %s", file, lines[i], target, anchor, dest))
		}
	}
	return bad, nil
}

func TestDocLinksLeadSomewhere(t *testing.T) {
	root := filepath.Join("..", "..")
	docs := documents(t, root)
	if len(docs) < 2 {
		t.Fatalf("found %d documents under %s; want README.md and docs/*.md", len(docs), root)
	}
	for _, f := range docs {
		bad, err := broken(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Error(b)
		}
	}
}

// The check itself: a missing file, a missing heading and a link into a
// directory with an anchor are each reported; links that resolve, links in
// code and links elsewhere are not.
func TestBrokenLinksAreFound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sub/B.md", "# Title\n\n## Memory quotas, per device (`--mem`)\n\n## Memory quotas, per device (`--mem`)\n")
	write("A.md", strings.Join([]string{
		"# A",
		"[ok](sub/B.md) [ok](sub/B.md#title) [ok](sub/B.md#memory-quotas-per-device---mem)",
		"[ok](sub/B.md#memory-quotas-per-device---mem-1) [ok](#a) [ok](sub/) [web](https://example.com/x.md)",
		"`[code](nowhere.md)`",
		"```",
		"[fenced](nowhere.md)",
		"```",
		"[gone](missing.md)",
		"[no heading](sub/B.md#nothing)",
		"[dir anchor](sub/#x)",
		"[self](#b)",
	}, "\n"))
	bad, err := broken(filepath.Join(dir, "A.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A.md:8: missing.md: no such file", "A.md:9: sub/B.md#nothing: no heading", "A.md:10: sub/#x: an anchor", "A.md:11: #b: no heading"}
	if len(bad) != len(want) {
		t.Fatalf("broken links found:\n%s\nwant %d: %q", strings.Join(bad, "\n"), len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(bad[i], w) {
			t.Errorf("finding %d: %q, want it to say %q", i, bad[i], w)
		}
	}
}
