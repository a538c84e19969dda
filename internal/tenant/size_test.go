package tenant

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"1024": 1024, "1B": 1, "4KiB": 4096, "1.5MiB": 1572864, "8GiB": 8 << 30, "2KB": 2000, "3MB": 3e6, "1GB": 1e9, " 2 GiB ": 2 << 30,
		"1.5KiB": 1536, "1.1KB": 1100, "0.001KB": 1, "2.TiB": 2 << 40, ".5KiB": 512, "0": 0,
		"18446744073709551615": 1<<64 - 1,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, c := range []struct{ in, msg string }{
		{"", "not a size"}, {"lots", "not a size"}, {"-1GiB", "not a size"}, {"1XB", "not a size"}, {"GiB", "not a size"},
		{"1e3", "not a size"}, {"0x10", "not a size"}, {"1/2KiB", "not a size"}, {"50%", "not a size"}, {"Inf", "not a size"},
		{"1.5B", "not a whole number of bytes"}, {"0.3B", "not a whole number of bytes"},
		{"1.0000001KiB", "not a whole number of bytes"}, {"0.0001KB", "not a whole number of bytes"},
		{"18446744073709551616", "too large"}, {"16777216TiB", "too large"},
	} {
		if _, err := ParseSize(c.in); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseSize(%q) = %v; want an error with %q", c.in, err, c.msg)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for b, want := range map[uint64]string{
		512: "512B", 1536: "1.50KiB", 1 << 20: "1MiB", 1<<20 - 1: "1023.99KiB", 16 << 30: "16GiB", 16<<30 + 1: "16.00GiB",
	} {
		if got := FormatSize(b); got != want {
			t.Errorf("FormatSize(%d) = %s, want %s", b, got, want)
		}
	}
}
