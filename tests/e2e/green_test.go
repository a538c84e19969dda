package e2e

import (
	"regexp"
	"testing"
)

// Green contexts, as a program that partitions the GPU's SMs uses them
// (tests/clients/greenctx.c): the simulated GPU splits its 40 SMs in groups
// of 8, refuses what a driver refuses, and runs a green context's kernel
// on its group's SMs only, 5 times as long; the program prints the same
// under the shim and over every transport.
func TestGreenContexts(t *testing.T) {
	argv := []string{"greenctx"}
	e := newEnv(t)
	local := runsLocally(t, e, argv,
		"device: 40 SMs (at least 2 a group, 8 run together), 5 groups of 8 possible\n",
		"split into 2 of at least 5: 2 groups of 8, 24 SMs left\n",
		"split refusals: no resource type CUDA_ERROR_INVALID_RESOURCE_TYPE, more than the device CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "+
			"a group split again CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION\n",
		"descriptors: two groups of one split CUDA_SUCCESS, a group with the device CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION\n",
		"SMs: the green context 8, its context 8, the primary context 40\n",
		"its stream: green context its own, context none (v1 its context)\n",
		"a kernel on 8 of 40 SMs takes 5.0 times as long\n",
		"memory in it: 42; its event: CUDA_SUCCESS; a wait for an event never recorded: CUDA_SUCCESS\n",
		"greenctx: done\n")
	if r := e.run("flexgv", "run", "--mem", "1GiB", "--", bin("greenctx")); r.code != 0 || r.stdout != local.stdout {
		t.Errorf("under the shim: exit %d\n%s\nwant\n%s\n%s", r.code, r.stdout, local.stdout, r.stderr)
	}
	printsAsLocally(t, local, argv, "shm", "unix", "tcp")
}

// A green context is a context: under a quota each is charged the memory a
// context takes (the simulated GPU's 64 MiB), refused once none fits, with
// the shim's message, and given back when it goes.
func TestGreenContextsAreCharged(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "run", "--mem", "256MiB", "--ctx-mem", "64MiB", "--", bin("greenctx"), "quota")
	want := "green contexts: 3 made, then CUDA_ERROR_OUT_OF_MEMORY\nonce they are gone, another: CUDA_SUCCESS\n"
	said := regexp.MustCompile(`quota 256MiB, in use 256MiB, requested 64MiB \(a CUDA context\)`)
	if r.code != 0 || r.stdout != want || !said.MatchString(r.stderr) {
		t.Errorf("exit %d\n%s\nwant\n%s\n%s", r.code, r.stdout, want, r.stderr)
	}
}
