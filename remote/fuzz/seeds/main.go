// Command seeds writes the first inputs of the executor's native fuzzer
// (remote/fuzz/native) into a folder, one file each (fuzz.Seeds).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/flexgv/flexgv/remote/fuzz"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: seeds DIR")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "seeds:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	seeds, err := fuzz.Seeds()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, in := range seeds {
		if err := os.WriteFile(filepath.Join(dir, name), in, 0o644); err != nil {
			return err
		}
	}
	return nil
}
