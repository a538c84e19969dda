package ckpt

import "testing"

func TestParseUUID(t *testing.T) {
	u, err := ParseUUID("GPU-f1e96000-5e1d-4000-8000-0000000000a1")
	want := [16]byte{0xf1, 0xe9, 0x60, 0x00, 0x5e, 0x1d, 0x40, 0x00, 0x80, 0x00, 0, 0, 0, 0, 0, 0xa1}
	if err != nil || u != want {
		t.Errorf("ParseUUID: %x, %v", u, err)
	}
	for _, bad := range []string{"", "GPU-", "GPU-f1e96000-5e1d-4000-8000-0000000000", "GPU-zz", "MIG-f1e96000-5e1d-4000-8000-0000000000a1x"} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("ParseUUID(%q) accepted", bad)
		}
	}
	if FormatVersion(RemapVersion) != "13.0" {
		t.Errorf("RemapVersion %d reads %s", RemapVersion, FormatVersion(RemapVersion))
	}
}
