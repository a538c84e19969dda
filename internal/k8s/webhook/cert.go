package webhook

import (
	"crypto/tls"
	"sync"
	"syscall"
)

// KeyPair is the serving certificate, read again from its files whenever
// they change: a Secret mounted as a volume is updated in place (the
// kubelet swaps a symlink), and nothing restarts the webhook when it is.
type KeyPair struct {
	certFile, keyFile string
	// Log is told of a changed pair that does not load; the last good
	// one is served meanwhile (the two files change one after the other).
	Log func(format string, args ...any)

	mu    sync.Mutex
	stamp [2]fileStamp
	cur   *tls.Certificate
}

// fileStamp tells a file's versions apart: a replaced file has another
// inode, one rewritten in place another size or time.
type fileStamp struct {
	ino, size uint64
	mtime     syscall.Timespec
}

func stampOf(path string) (fileStamp, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileStamp{}, err
	}
	return fileStamp{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim}, nil
}

// LoadKeyPair reads the pair now, failing if it does not load.
func LoadKeyPair(certFile, keyFile string) (*KeyPair, error) {
	k := &KeyPair{certFile: certFile, keyFile: keyFile, Log: func(string, ...any) {}}
	if err := k.reload(); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *KeyPair) reload() error {
	var stamp [2]fileStamp
	var serr error
	for i, f := range []string{k.certFile, k.keyFile} {
		if stamp[i], serr = stampOf(f); serr != nil {
			break
		}
	}
	if serr == nil && k.cur != nil && stamp == k.stamp {
		return nil
	}
	pair, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	k.cur, k.stamp = &pair, stamp
	return nil
}

// GetCertificate is for tls.Config: the pair as its files are now.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.reload(); err != nil {
		k.Log("serving certificate not reloaded from %s and %s: %v", k.certFile, k.keyFile, err)
	}
	return k.cur, nil
}
