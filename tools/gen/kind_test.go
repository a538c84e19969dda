package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// wireItem is one thing a request or an answer carries: how it is
// encoded (the suffix of fgr_put_X and fgr_get_X, or out and inout for a
// result), the parameter it is, and its size in bytes where the two
// sides each compute it.
type wireItem struct{ how, param, size string }

var (
	putRE     = regexp.MustCompile(`fgr_put_(\w+)\(&fgr_c\.w, (.*)\);`)
	decodeRE  = regexp.MustCompile(`\b(\w+) = .*fgr_get_(\w+)\(rd(.*)\);`)
	getOutRE  = regexp.MustCompile(`fgr_get_out\(&fgr_c, (\w+), n_\w+, (\d)\);`)
	replyRE   = regexp.MustCompile(`fgr_reply_out\(q, (\w+), (.*), (\d), fgr_r\);`)
	countRE   = regexp.MustCompile(`uint64_t n_(\w+) = \w+ \? (.*) : 0;`)
	callRE    = regexp.MustCompile(`\(\(pfn_\w+\)fgr_real\[FGR_OP_\w+\]\)\((.*)\)`)
	getBufRE  = regexp.MustCompile(`^, q, (.*), \d$`)
	identRE   = regexp.MustCompile(`[A-Za-z_]\w*`)
	extraArgs = regexp.MustCompile(`fgr_extra_check\((\w+),`)
)

// body is the text of the C function whose definition starts with head.
func body(t *testing.T, src, head string) string {
	t.Helper()
	i := strings.Index(src, head)
	if i < 0 {
		t.Fatalf("no %q in the generated code", head)
	}
	j := strings.Index(src[i:], "\n}\n")
	return src[i : i+j]
}

// clientWire is what a client stub puts in its request and takes from the
// answer, in order.
func clientWire(stub string, e RemoteEntry) (req, ans []wireItem) {
	sizes := map[string]string{}
	for _, m := range countRE.FindAllStringSubmatch(stub, -1) {
		sizes[m[1]] = m[2]
	}
	for _, m := range putRE.FindAllStringSubmatch(stub, -1) {
		it := wireItem{how: m[1]}
		for _, id := range identRE.FindAllString(m[2], -1) {
			if id == "fgr_ex" { // the extra checked (and packed) before
				id = extraArgs.FindStringSubmatch(stub)[1]
			}
			if e.param(id) != nil {
				it.param = id
				break
			}
		}
		if it.how == "buf" {
			it.size = sizes[it.param]
		}
		req = append(req, it)
	}
	for _, m := range getOutRE.FindAllStringSubmatch(stub, -1) {
		ans = append(ans, wireItem{map[string]string{"0": "out", "1": "inout"}[m[2]], m[1], sizes[m[1]]})
	}
	return req, ans
}

// executorWire is what an executor operation reads from the request and
// puts in the answer, in order.
var outSizeRE = regexp.MustCompile(`const uint64_t (fgr_n_\w+) = (.*);`)

func executorWire(op string) (req, ans []wireItem) {
	for _, m := range decodeRE.FindAllStringSubmatch(op, -1) {
		it := wireItem{how: m[2], param: strings.TrimPrefix(strings.TrimPrefix(m[1], "has_"), "fgr_id_")}
		if it.how == "buf" {
			it.size = getBufRE.FindStringSubmatch(m[3])[1]
		}
		req = append(req, it)
	}
	// A counted result's size, taken before the call.
	sizes := map[string]string{}
	for _, m := range outSizeRE.FindAllStringSubmatch(op, -1) {
		sizes[m[1]] = m[2]
	}
	for _, m := range replyRE.FindAllStringSubmatch(op, -1) {
		size := m[2]
		if s, ok := sizes[size]; ok {
			size = s
		}
		ans = append(ans, wireItem{map[string]string{"0": "out", "1": "inout"}[m[3]], m[1], size})
	}
	return req, ans
}

// Each kind, given alone in a small spec, makes a client stub and an
// executor operation that agree on the request's and the answer's bytes:
// the same encodings in the same order for the same parameters, buffers of
// the same size; and the executor declares every argument it hands the
// driver.
func TestKindsAgreeOnTheWire(t *testing.T) {
	cases := []struct {
		kind, line string
		want       []string // how:param items the request must carry
		frame      string
		also       []string // what the stub or the operation must hold besides
	}{
		{"value", "1000 cuTValue(int a, size_t b, CUjit_option c) sync", []string{"u64:a", "u64:b", "u64:c"}, "FGR_SMALL_FRAME", nil},
		{"handle", "1000 cuTHandle(CUstream hStream, CUfunction f) sync", []string{"u64:hStream", "u64:f"}, "FGR_SMALL_FRAME", []string{"fgr_has(FGR_H_CUstream, (uint64_t)(uintptr_t)hStream)", "fgr_in(FGR_H_CUstream, fgr_get_u64(rd))", "fgr_has(FGR_H_CUfunction"}},
		{"dev base any", "1000 cuTAddr(CUdeviceptr d, CUdeviceptr b, CUdeviceptr x, size_t n) sync d=dev[n] b=base x=any", []string{"u64:d", "u64:b", "u64:x", "u64:n"}, "FGR_SMALL_FRAME", []string{"fgr_mem_in((uint64_t)(uintptr_t)d, n)", "fgr_mem_base((uint64_t)(uintptr_t)b)", "fgr_mirror_named((uint64_t)(uintptr_t)d)"}},
		{"alloc", "1000 cuTAlloc(CUdeviceptr *d, size_t n) sync d=alloc[n]", []string{"u64:n", "u8:d"}, "FGR_SMALL_FRAME", []string{"fgr_mem_add(*d, n, FGR_H_CUcontext, fgr_ctx)", "fgr_range_add((uint64_t)*d, (uint64_t)(n))"}},
		{"alloc found", "1000 cuTFound(CUdeviceptr *d, size_t *n) sync d=alloc[~n] n=out", []string{"u8:d", "u8:n"}, "FGR_SMALL_FRAME", []string{"fgr_mem_add_found(*d, n ? *n : 0, FGR_H_CUcontext, fgr_ctx)"}},
		{"in", "1000 cuTIn(const void *p, size_t n, const CUstream *s, const CUDA_GRAPH_INSTANTIATE_PARAMS *g) sync p=in[n] s=in g=in", []string{"u64:n", "buf:p", "buf:s", "buf:g"}, "FGR_MAX_FRAME", []string{"fgr_has_n(FGR_H_CUstream, s, sizeof(CUstream) / sizeof(CUstream))", "g->hUploadStream", "n_p > FGR_MAX_BUF", "fgr_in_n(FGR_H_CUstream, s, sizeof(CUstream) / sizeof(CUstream))"}},
		{"out", "1000 cuTOut(void *p, size_t n, CUevent *e) sync p=out[n] e=out", []string{"u64:n", "u8:p", "u8:e"}, "FGR_SMALL_FRAME", []string{"!has_p || fgr_mul((uint64_t)(n), 1) <= FGR_SMALL_FRAME", "fgr_add(FGR_H_CUevent, (uint64_t)(uintptr_t)*e", "const uint64_t fgr_n_p = fgr_mul((uint64_t)(n), 1);", "p = fgr_out(q, fgr_n_p)", "fgr_out_n(FGR_H_CUevent, e, 1) != 0"}},
		// A result counted by an in-out parameter the call changes: its
		// size is the one asked for, taken before the call.
		{"out counted by inout", "1000 cuTOutInout(CUgraphNode *p, size_t *n) sync p=out[n?*n:0] n=inout", []string{"u8:p", "buf:n"}, "FGR_SMALL_FRAME", []string{"const uint64_t fgr_n_p = fgr_mul((uint64_t)(n?*n:0), sizeof(CUgraphNode));\n    CUresult fgr_r", "fgr_reply_out(q, p, fgr_n_p, 0, fgr_r)"}},
		{"inout", "1000 cuTInout(int *p, CUstream *s, unsigned int n) sync p=inout s=inout[n]", []string{"u64:n", "buf:p", "buf:s"}, "FGR_MAX_FRAME", nil},
		{"str", "1000 cuTStr(const char *s) sync s=str", []string{"str:s"}, "FGR_SMALL_FRAME", nil},
		{"image", "1000 cuTImage(CUmodule *m, const void *image) sync m=out image=image", []string{"u8:m", "image:image"}, "FGR_MAX_FRAME", nil},
		{"null", "1000 cuTNull(void *p, int a) sync p=null", []string{"u64:a"}, "FGR_SMALL_FRAME", []string{"if (p != NULL)", "void *p = NULL;"}},
		{"kparams", "1000 cuTKparams(CUfunction f, void **kernelParams) sync kernelParams=kparams", []string{"u64:f", "kparams:kernelParams"}, "FGR_SMALL_FRAME", nil},
		{"extra", "1000 cuTExtra(CUfunction f, void **kernelParams, void **extra) sync kernelParams=kparams extra=extra", []string{"u64:f", "kparams:kernelParams", "extra:extra"}, "FGR_SMALL_FRAME", nil},
		{"launchcfg", "1000 cuTLaunchcfg(const CUlaunchConfig *config, CUfunction f, void **kernelParams) sync config=launchcfg kernelParams=kparams", []string{"u64:f", "launchcfg:config", "kparams:kernelParams"}, "FGR_SMALL_FRAME", []string{"fgr_launchcfg_check(config", "fgr_launchcfg_events_ok(config)", "config->hStream"}},
		{"jitopts optvalues", "1000 cuTJit(CUmodule *m, const void *image, unsigned int numOptions, CUjit_option *options, void **optionValues) sync m=out image=image options=jitopts[numOptions] optionValues=optvalues", []string{"u64:numOptions", "u8:m", "image:image", "opts:options"}, "FGR_MAX_FRAME", []string{"fgr_opts_check(FGR_OPTS_JIT", "fgr_get_opts(rd, q, FGR_OPTS_JIT, &optionValues, &numOptions)"}},
		{"libopts optvalues", "1000 cuTLib(CUlibrary *l, unsigned int n, CUlibraryOption *o, void **v) sync l=out o=libopts[n] v=optvalues", []string{"u64:n", "u8:l", "opts:o"}, "FGR_SMALL_FRAME", []string{"fgr_opts_check(FGR_OPTS_LIBRARY", "fgr_get_opts(rd, q, FGR_OPTS_LIBRARY, &v, &n)"}},
		{"shadow", "1000 cuTShadow(CUstream *s, unsigned int flags) queued s=shadow", []string{"u64:flags", "u64:s"}, "FGR_SMALL_FRAME", []string{"fgr_is_shadow(fgr_id_s)", "fgr_shadow_add(FGR_H_CUstream, fgr_id_s", "fgr_shadow_new()"}},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "remote.api")
			if err := os.WriteFile(p, []byte(c.line+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			entries, tables, err := parseRemote(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			e := entries[0]
			client, executor := emitRemoteClient(entries, tables), emitRemoteServer(entries, tables)
			stub := body(t, client, "FGR_EXPORT CUresult "+e.Name+"(")
			op := body(t, executor, "static CUresult op_"+e.Name+"(")
			creq, cans := clientWire(stub, e)
			ereq, eans := executorWire(op)
			if !sameWire(creq, ereq) {
				t.Errorf("request: client puts %v, executor gets %v\n%s\n%s", creq, ereq, stub, op)
			}
			if !sameWire(cans, eans) {
				t.Errorf("answer: executor replies %v, client gets %v\n%s\n%s", eans, cans, op, stub)
			}
			var got []string
			for _, it := range creq {
				got = append(got, it.how+":"+it.param)
			}
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("request carries %v, want %v", got, c.want)
			}
			for _, a := range strings.Split(callRE.FindStringSubmatch(op)[1], ", ") {
				if !regexp.MustCompile(`[ *]` + a + ` = `).MatchString(op) {
					t.Errorf("the executor hands the driver %s without setting it:\n%s", a, op)
				}
			}
			for _, want := range c.also {
				if !strings.Contains(stub, want) && !strings.Contains(op, want) {
					t.Errorf("neither side holds %q:\n%s\n%s", want, stub, op)
				}
			}
			if want := "op_" + e.Name + ", 0, " + c.frame + "}"; !strings.Contains(executor, want) {
				t.Errorf("operation table lacks %q", want)
			}
		})
	}
}

func sameWire(a, b []wireItem) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// An export table's function that answers a value carries it as bits the
// two sides agree on.
func TestTableFunctionResultBits(t *testing.T) {
	p := filepath.Join(t.TempDir(), "remote.api")
	spec := "table 00000000-0000-0000-0000-000000000001 t 2\nslot 0 size\nslot 1 sync double f(float x, int n)\n"
	if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, tables, err := parseRemote(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	client, executor := emitRemoteClient(entries, tables), emitRemoteServer(entries, tables)
	stub := body(t, client, "static double xt_t_1(")
	op := body(t, executor, "static CUresult op_xt_t_1(")
	for _, pair := range [][2]string{
		{"fgr_put_u64(&fgr_c.w, (uint64_t)fgr_f32_bits(x));", "float x = fgr_bits_f32((uint32_t)fgr_get_u64(rd));"},
		{"return fgr_bits_f64(fgr_v);", "fgr_put_u64(q->reply, fgr_f64_bits("},
	} {
		if !strings.Contains(stub, pair[0]) || !strings.Contains(op, pair[1]) {
			t.Errorf("client %q and executor %q do not both appear:\n%s\n%s", pair[0], pair[1], stub, op)
		}
	}
}
