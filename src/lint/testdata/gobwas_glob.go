// The reference for src/glob.rs. Regenerate gobwas_glob.tsv with, in a directory holding
// this file and a go.mod that requires github.com/gobwas/glob v0.2.3 (Argo CD 3.x's version):
//
//	go run . | sort -u > gobwas_glob.tsv
//
// Prints gobwas/glob v0.2.3's answers (as argo-cd util/glob.Match calls it: no separators)
// for random short patterns and texts: "pattern<TAB>text<TAB>1|0" per line.
package main

import (
	"fmt"
	"math/rand"

	"github.com/gobwas/glob"
)

func pick(r *rand.Rand, alphabet []rune, max int) string {
	n := r.Intn(max + 1)
	out := make([]rune, n)
	for i := range out {
		out[i] = alphabet[r.Intn(len(alphabet))]
	}
	return string(out)
}

// match is Argo CD's util/glob.Match: a pattern that does not compile matches nothing. ok is
// false where gobwas panics (its own bugs; Argo CD would crash there, so there is nothing to
// mirror).
func match(p, t string) (matched int, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	g, err := glob.Compile(p)
	if err == nil && g.Match(t) {
		return 1, true
	}
	return 0, true
}

func main() {
	r := rand.New(rand.NewSource(30))
	patterns := []rune("aaabbb**?[]!-{},\\")
	texts := []rune("aaaabbbb-,!]}*")
	narrow := []rune("aabb**??{},[]!-")
	for i := 0; i < 10000; i++ {
		p, t := pick(r, patterns, 9), pick(r, texts, 6)
		if i%2 == 1 {
			// Fewer characters: more patterns compile and more texts match.
			p, t = pick(r, narrow, 7), pick(r, []rune("ab"), 4)
		}
		matched, ok := match(p, t)
		if !ok {
			continue
		}
		fmt.Printf("%s\t%s\t%d\n", p, t, matched)
	}
}
