// Command flexgv runs CUDA programs under the FlexGV shim, traces them and
// inspects the node.
package main

import (
	"os"

	"github.com/flexgv/flexgv/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
