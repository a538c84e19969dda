package tenant

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"
)

var units = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// decimal is what ParseSize takes as a number: no sign, exponent or base
// prefix, so that every accepted size is exact.
var decimal = regexp.MustCompile(`^([0-9]+\.?[0-9]*|\.[0-9]+)$`)

// ParseSize reads a byte count: a decimal number, with or without a
// fraction, and an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB).
// It must come to a whole number of bytes ("1.5KiB" is 1536, "1.5B" is an
// error) that fits in a uint64. It does not take percentages (ParseMem
// does) and sets no lower bound: callers refuse sizes too small for them.
func ParseSize(s string) (uint64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	if !decimal.MatchString(num) {
		return 0, fmt.Errorf("%q is not a size (use a number with B, KiB, MiB, GiB, KB, MB or GB)", s)
	}
	v, _ := new(big.Rat).SetString(num)
	v.Mul(v, new(big.Rat).SetInt64(mult))
	if !v.IsInt() {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	if !v.Num().IsUint64() {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return v.Num().Uint64(), nil
}

// FormatSize prints bytes with a binary unit: whole units exactly, others
// with two decimals rounded down, so that a size just below a bound never
// prints as the bound.
func FormatSize(b uint64) string {
	for _, u := range []struct {
		s string
		m uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b >= u.m {
			if b%u.m == 0 {
				return fmt.Sprintf("%d%s", b/u.m, u.s)
			}
			return fmt.Sprintf("%.2f%s", math.Floor(float64(b)/float64(u.m)*100)/100, u.s)
		}
	}
	return fmt.Sprintf("%dB", b)
}
