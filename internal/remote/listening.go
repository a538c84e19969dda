package remote

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// soAcceptCon is the flag /proc/net/unix gives a listening socket.
const soAcceptCon = 1 << 16

// listeningUnix reports whether /proc/net/unix lists a socket listening
// on path: a live server found without connecting to it, which it would
// log as a client that left during authentication.
func listeningUnix(path string) bool {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || strings.Join(fields[7:], " ") != path {
			continue
		}
		if flags, err := strconv.ParseUint(fields[3], 16, 32); err == nil && flags&soAcceptCon != 0 {
			return true
		}
	}
	return false
}
