// Command etcd is etcd's own server, built from the go.etcd.io/etcd/server
// module that k8s.io/kubernetes pins, for the test control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
