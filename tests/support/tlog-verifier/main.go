// A verifier of Warden's audit log that no one at Warden wrote the checking parts of: Go's own
// transparency-log packages (golang.org/x/mod/sumdb/note and sumdb/tlog, as Debian ships them in
// golang-golang-x-mod-dev), reading the log as C2SP tlog-tiles serves it.
//
//	verifier <log URL> <key> <vkey> <inclusions> <older checkpoints file>
//
// It opens the latest checkpoint with the vkey, reads hash tiles through tlog.TileHashReader
// (which checks every tile it reads against the signed root), and proves the inclusion of
// <inclusions> leaves, each read from its entry bundle and hashed as a record, and the
// consistency of every older signed checkpoint in the file (notes separated by a line "---")
// with the latest. Any failure is fatal, with exit code 1.
package main

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type tiles struct{ base, key string }

func (t *tiles) get(path string) ([]byte, error) {
	req, err := http.NewRequest("GET", t.base+"/"+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+t.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
	}
	return body, nil
}

// x/mod names tiles tile/<H>/<L>/<N>[.p/<W>], and entry bundles "data"; tlog-tiles drops the
// height (always 8) and names the bundles "entries".
func path(t tlog.Tile) string {
	p := strings.TrimPrefix(t.Path(), fmt.Sprintf("tile/%d/", t.H))
	if strings.HasPrefix(p, "data/") {
		p = "entries/" + strings.TrimPrefix(p, "data/")
	}
	return "tile/" + p
}

func (t *tiles) Height() int { return 8 }

func (t *tiles) ReadTiles(list []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(list))
	for i, tile := range list {
		data, err := t.get(path(tile))
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}

func (t *tiles) SaveTiles([]tlog.Tile, [][]byte) {}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// A checkpoint note opened with the log's key: its size and root.
func open(text []byte, verifier note.Verifier) (int64, tlog.Hash) {
	n, err := note.Open(text, note.VerifierList(verifier))
	if err != nil {
		fail("checkpoint signature: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 {
		fail("checkpoint body: %q", n.Text)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("checkpoint size: %v", err)
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		fail("checkpoint root: %q", lines[2])
	}
	var hash tlog.Hash
	copy(hash[:], root)
	return size, hash
}

// The i-th entry of an entry bundle: big-endian uint16 lengths, each followed by the entry.
func entry(bundle []byte, i int) []byte {
	for k := 0; ; k++ {
		if len(bundle) < 2 {
			fail("entry bundle ends before entry %d", i)
		}
		length := int(binary.BigEndian.Uint16(bundle))
		if len(bundle) < 2+length {
			fail("entry bundle cut inside entry %d", k)
		}
		if k == i {
			return bundle[2 : 2+length]
		}
		bundle = bundle[2+length:]
	}
}

func main() {
	if len(os.Args) != 6 {
		fail("usage: verifier <log URL> <key> <vkey> <inclusions> <older checkpoints file>")
	}
	log := &tiles{base: strings.TrimSuffix(os.Args[1], "/"), key: os.Args[2]}
	verifier, err := note.NewVerifier(os.Args[3])
	if err != nil {
		fail("vkey: %v", err)
	}
	inclusions, _ := strconv.Atoi(os.Args[4])
	latest, err := log.get("checkpoint")
	if err != nil {
		fail("%v", err)
	}
	size, root := open(latest, verifier)
	tree := tlog.Tree{N: size, Hash: root}
	hashes := tlog.TileHashReader(tree, log)
	if h, err := tlog.TreeHash(size, hashes); err != nil || h != root {
		fail("the tiles do not make the signed root: %v", err)
	}

	random := rand.New(rand.NewSource(size))
	for k := 0; k < inclusions; k++ {
		index := random.Int63n(size)
		bundle := tlog.Tile{H: 8, L: -1, N: index / 256, W: int(min64(256, size-index/256*256))}
		data, err := log.get(path(bundle))
		if err != nil {
			fail("%v", err)
		}
		record := tlog.RecordHash(entry(data, int(index%256)))
		proof, err := tlog.ProveRecord(size, index, hashes)
		if err != nil {
			fail("inclusion proof of %d: %v", index, err)
		}
		if err := tlog.CheckRecord(proof, size, root, index, record); err != nil {
			fail("entry %d is not in the log: %v", index, err)
		}
	}

	older, err := os.ReadFile(os.Args[5])
	if err != nil {
		fail("%v", err)
	}
	consistent := 0
	for _, text := range strings.Split(string(older), "---\n") {
		if strings.TrimSpace(text) == "" {
			continue
		}
		oldSize, oldRoot := open([]byte(text), verifier)
		proof, err := tlog.ProveTree(size, oldSize, hashes)
		if err != nil {
			fail("consistency proof from %d: %v", oldSize, err)
		}
		if err := tlog.CheckTree(proof, size, root, oldSize, oldRoot); err != nil {
			fail("the checkpoint of size %d is not a prefix of the log: %v", oldSize, err)
		}
		consistent++
	}
	fmt.Printf("checkpoint %d verified: %d inclusion proofs, %d consistency proofs\n", size, inclusions, consistent)
}

func min64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}
