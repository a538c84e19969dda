package remote

import (
	"sync"
	"time"
)

// Wrong tokens are rationed per network (netKey), as a token bucket: a
// network may present guessBurst wrong (or missing) tokens in a row, then
// one per guessEvery; past that its wrong tokens are refused as rationed,
// their lines rate-limited, and a right token is still served. Tokens must
// be random enough that guessing is hopeless (MinToken): this keeps the
// log readable and a loop of guesses visible, from any address within the
// network.
const (
	guessBurst = 20
	guessEvery = 3 * time.Second
	maxPeers   = 4096 // networks remembered; the fullest bucket is forgotten first
)

type guesses struct {
	mu    sync.Mutex
	peers map[string]*bucket
}

type bucket struct {
	left float64
	at   time.Time
}

// refill brings key's bucket to now; it returns nil when key has a full one.
func (g *guesses) refill(key string, now time.Time) *bucket {
	b := g.peers[key]
	if b == nil {
		return nil
	}
	b.left += float64(now.Sub(b.at)) / float64(guessEvery)
	b.at = now
	if b.left >= guessBurst {
		delete(g.peers, key)
		return nil
	}
	return b
}

// allowed reports whether key may present a token now.
func (g *guesses) allowed(key string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.refill(key, now)
	return b == nil || b.left >= 1
}

// wrong counts a wrong or missing token of key.
func (g *guesses) wrong(key string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.peers == nil {
		g.peers = map[string]*bucket{}
	}
	b := g.refill(key, now)
	if b == nil {
		if len(g.peers) >= maxPeers {
			g.forgetFullest(now)
		}
		b = &bucket{left: guessBurst, at: now}
		g.peers[key] = b
	}
	if b.left >= 1 {
		b.left--
	}
}

// forgetFullest drops the peer that guessed least lately.
func (g *guesses) forgetFullest(now time.Time) {
	var key string
	best := -1.0
	for k, b := range g.peers {
		if left := b.left + float64(now.Sub(b.at))/float64(guessEvery); left > best {
			key, best = k, left
		}
	}
	delete(g.peers, key)
}
