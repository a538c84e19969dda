package ckpt

import "fmt"

// FormatVersion writes a cuDriverGetVersion number as CUDA writes it:
// 12080 is 12.8.
func FormatVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }
