package main

import (
	"fmt"
	"regexp"
	"strings"
)

// emitTypeCheck writes a C program that prints every enumerator, macro
// constant, typedef size and struct field offset of our cuda_types.h. It is
// built twice on the GPU machine, against our header and against the real
// cuda.h, and the two outputs must be identical.
func emitTypeCheck(header, results string) string {
	var b strings.Builder
	b.WriteString(cHeader)
	b.WriteString("/* Build with -DREAL_CUDA_H against the real header, without it against\n * ours; the outputs must match (scripts/gpu-e2e.sh). */\n")
	b.WriteString("#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n#ifdef REAL_CUDA_H\n#include <cuda.h>\n#else\n#include \"flexgv/cuda_types.h\"\n#endif\n\n")
	b.WriteString("#define VAL(x) printf(\"%s = %lld\\n\", #x, (long long)(x))\n")
	b.WriteString("#define PTR(x) printf(\"%s = %lld\\n\", #x, (long long)(uintptr_t)(x))\n")
	b.WriteString("#define SIZE(t) printf(\"sizeof(%s) = %zu\\n\", #t, sizeof(t))\n")
	b.WriteString("#define FIELD(t, f) printf(\"%s.%s at %zu size %zu\\n\", #t, #f, offsetof(t, f), sizeof(((t *)0)->f))\n\n")
	b.WriteString("int main(void)\n{\n")
	for _, m := range regexp.MustCompile(`X\((\w+), -?\d+\)`).FindAllStringSubmatch(results, -1) {
		fmt.Fprintf(&b, "    VAL(%s);\n", m[1])
	}
	for _, m := range regexp.MustCompile(`(?m)^\s+(CU_\w+) = `).FindAllStringSubmatch(header, -1) {
		fmt.Fprintf(&b, "    VAL(%s);\n", m[1])
	}
	for _, m := range regexp.MustCompile(`(?m)^#define (CU_\w+) (.*)$`).FindAllStringSubmatch(header, -1) {
		if strings.Contains(m[2], "CUstream") || strings.Contains(m[2], "void *") {
			fmt.Fprintf(&b, "    PTR(%s);\n", m[1])
		} else {
			fmt.Fprintf(&b, "    VAL(%s);\n", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^typedef [\w ]+?\*?\s*(\w+);$`).FindAllStringSubmatch(header, -1) {
		if !strings.HasSuffix(m[0], "_st "+m[1]+";") { // incomplete structs have no size
			fmt.Fprintf(&b, "    SIZE(%s);\n", m[1])
		}
	}
	// Complete structs: "typedef struct X_st {" ... "} NAME;" with top-level fields.
	structRE := regexp.MustCompile(`(?s)typedef struct \w+ \{\n(.*?)\n\} (\w+);`)
	fieldRE := regexp.MustCompile(`^    (?:[\w ]+?\**)\s*\**(\w+)(?:\[\d+\])?;$`)
	for _, m := range structRE.FindAllStringSubmatch(header, -1) {
		fmt.Fprintf(&b, "    SIZE(%s);\n", m[2])
		depth := 0
		for _, line := range strings.Split(m[1], "\n") {
			if strings.Contains(line, "{") {
				depth++
				continue
			}
			if strings.Contains(line, "}") {
				depth--
				if f := regexp.MustCompile(`\} (\w+);`).FindStringSubmatch(line); f != nil && depth == 0 {
					fmt.Fprintf(&b, "    FIELD(%s, %s);\n", m[2], f[1])
				}
				continue
			}
			if f := fieldRE.FindStringSubmatch(line); f != nil && depth == 0 {
				fmt.Fprintf(&b, "    FIELD(%s, %s);\n", m[2], f[1])
			}
		}
	}
	b.WriteString("    return 0;\n}\n")
	return b.String()
}
