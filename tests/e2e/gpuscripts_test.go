package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The GPU scripts keep their logs out of the repository: without OUTDIR
// they write to a new folder under $TMPDIR, and an OUTDIR inside the
// repository is refused before anything is made there. Each script is also
// given an argument it refuses right after making its folder, so that
// without the check it stops there instead of running on the GPU.
func TestGPUScriptsKeepTheirLogsOutOfTheRepository(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join("docs", "gpu-runs", "refused-"+filepath.Base(t.TempDir()))
	for _, c := range []struct {
		script string
		args   []string
		env    string
	}{
		{"gpu-e2e.sh", nil, "PRIORITY_ROUNDS=none"},
		{"gpu-census.sh", []string{"--compare", filepath.Join(t.TempDir(), "none.json")}, ""},
		{"gpu-samples.sh", nil, "SAMPLES=" + filepath.Join(t.TempDir(), "none")},
	} {
		script := c.script
		cmd := exec.Command("bash", append([]string{filepath.Join("scripts", script), inside}, c.args...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), c.env)
		r := runCmd(t, cmd)
		if r.code != 2 || !strings.Contains(r.stdout+r.stderr, "OUTDIR "+inside+" is inside the repository") {
			t.Errorf("%s %s: exit %d, %q; want 2 and the folder refused as inside the repository", script, inside, r.code, r.stdout+r.stderr)
		}
		if _, err := os.Stat(filepath.Join(root, inside)); err == nil {
			t.Errorf("%s made %s although it refused it", script, inside)
			os.RemoveAll(filepath.Join(root, inside))
		}
	}

	tmp := t.TempDir()
	outside := filepath.Join(tmp, "given", "out")
	cmd := exec.Command("bash", "-c", `source scripts/outdir.sh && outdir gpu-e2e && outdir gpu-e2e "$1"`, "sh", outside)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	r := runCmd(t, cmd)
	lines := strings.Fields(r.stdout)
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("outdir: exit %d, %q %q; want two folders", r.code, r.stdout, r.stderr)
	}
	if !strings.HasPrefix(lines[0], filepath.Join(tmp, "flexgv-gpu-e2e.")) || lines[1] != outside {
		t.Errorf("outdir gave %q and %q; want a new folder in %s and %s", lines[0], lines[1], tmp, outside)
	}
	for _, d := range lines {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			t.Errorf("outdir did not make %s: %v", d, err)
		}
	}
}

// The matrix refuses settings it cannot run with, before it starts a
// load: each with a message that names it, and exit 2.
func TestGPUMatrixRefusesBadSettings(t *testing.T) {
	t.Parallel()
	refusesBadSettings(t, []string{"gpu-matrix.sh"}, []struct{ env, says string }{
		{"MATRIX_WARM=0", "MATRIX_WARM=0: give whole numbers from 1"},
		{"MATRIX_WARM=soon", "MATRIX_WARM=soon: give whole numbers from 1"},
		{"MATRIX_S=1.5", "MATRIX_S=1.5"},
		{"MATRIX_RATE=2", "MATRIX_RATE=2: give a fraction of the peak rate"},
		{"MATRIX_PER_S=infer:0", "MATRIX_PER_S: infer:0: give REQUEST:N"},
		{"MATRIX_PER_S=infer:fast", "MATRIX_PER_S: infer:fast: give REQUEST:N"},
		{"MATRIX_PER_S=matmul:100", "MATRIX_PER_S: matmul:100: give REQUEST:N"},
		{"MECHANISMS=vgpu", "unknown way of sharing vgpu"},
		{"SHARE_PAIRS=matmul:bert", "pair matmul:bert: give LOAD:LOAD"},
		{"PRIORITY_PAIRS=matmul:infer", "PRIORITY_PAIRS: matmul:infer is not REQUEST:TRAINER"},
	})
}

// So does the end-to-end script, for the settings it takes.
func TestGPUE2ERefusesBadSettings(t *testing.T) {
	t.Parallel()
	refusesBadSettings(t, []string{"gpu-e2e.sh", "sharecombos"}, []struct{ env, says string }{
		{"COMBOS=caphigh capall", "COMBOS: unknown run capall"},
		{"PRIORITY_ROUNDS=0", "PRIORITY_ROUNDS=0: give a whole number from 1"},
	})
}

// refusesBadSettings runs scripts/SCRIPT OUTDIR ARGS... (script: SCRIPT
// and ARGS) once a case, with its setting, and wants exit 2 and what it says.
func refusesBadSettings(t *testing.T, script []string, cases []struct{ env, says string }) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		args := append([]string{filepath.Join("scripts", script[0]), filepath.Join(t.TempDir(), "out")}, script[1:]...)
		cmd := exec.Command("bash", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), c.env)
		r := runCmd(t, cmd)
		if r.code != 2 || !strings.Contains(r.stdout+r.stderr, c.says) {
			t.Errorf("%s with %s: exit %d, %q; want 2 and %q", script[0], c.env, r.code, r.stdout+r.stderr, c.says)
		}
	}
}
