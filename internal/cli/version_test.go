package cli

import (
	"runtime/debug"
	"testing"
)

func TestVersionLineFallsBackOnBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"},
		{Key: "vcs.time", Value: "2026-12-03T14:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	for _, c := range []struct {
		commit, date string
		bi           *debug.BuildInfo
		ok           bool
		want         string
	}{
		{"", "", bi, true, "dev (commit 0123456789ab-dirty, built 2026-12-03T14:00:00Z)"},
		{"feedface", "2026-12-04", bi, true, "dev (commit feedface, built 2026-12-04)"},
		{"", "", nil, false, "dev (commit unknown, built unknown)"},
	} {
		Commit, BuildDate = c.commit, c.date
		if got := versionLine(c.bi, c.ok); got != c.want {
			t.Errorf("Commit %q, BuildDate %q: %q, want %q", c.commit, c.date, got, c.want)
		}
	}
	Commit, BuildDate = "", ""
}
