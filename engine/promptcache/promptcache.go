// Package promptcache is the prompt cache's disk tier: a directory of KV
// cache blocks that outlives the process, so that after a restart (or a
// switch back to a model) a prompt whose prefix was computed before loads
// it instead of computing it again.
//
// A block is one file, named by its scope (a hash of the identity of the
// model file and of the byte layout of the blocks; see Dir.Scope) and its
// chain hash (engine/kvcache's, which names the whole prefix up to and
// including the block). The file carries the identity in full, the chain
// hash and its parent's, the block's tokens, its bytes, and a CRC-32C of
// all of it. A read that finds anything amiss (a short or corrupt file, a
// foreign identity, another hash) deletes the file and reports a miss: a
// bad block is recomputed, never used.
//
// Files are written to a temporary name and renamed, so a process killed
// mid-write leaves no file that reads as a block (Open removes the
// leftovers); no write is synced, because a file that a power loss
// garbles fails its checksum. The directory is bounded by a byte size:
// past it the least recently used blocks are deleted. Use is recorded in
// the files' modification times, so the order survives a restart.
//
// A Dir is safe for concurrent use. It assumes it is the only user of its
// directory: two servers must not share one.
package promptcache

import (
	"bufio"
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultMaxBytes is the size bound of a Dir whose Options do not set one.
const DefaultMaxBytes = 10 << 30

// Options configure a Dir. The zero value means the defaults.
type Options struct {
	// MaxBytes bounds the bytes of the directory's block files; past it
	// the least recently used ones are deleted. Default DefaultMaxBytes.
	MaxBytes int64
}

// ErrMiss means the block is not in the directory.
var ErrMiss = errors.New("prompt cache: block not on disk")

// ErrCorrupt means a block file was unusable (corrupt, truncated, of
// another model or layout) and has been deleted.
var ErrCorrupt = errors.New("prompt cache: bad block file")

// Block is one KV cache block as stored.
type Block struct {
	// Parent is the chain hash of the block before it (the chain's root
	// for a prompt's first block).
	Parent uint64
	// Tokens are the block's tokens, which a reader compares with the
	// prompt's as a memory hit is verified.
	Tokens []int32
	// Data is the block's keys and values in the layout the scope's
	// identity names.
	Data []byte
}

// Stats are a Dir's gauges and counters.
type Stats struct {
	Blocks  int   // block files
	Bytes   int64 // their size
	Reads   int64 // blocks read and verified
	Writes  int64 // blocks written
	Refused int64 // bad block files found and deleted
	Evicted int64 // blocks deleted to keep within MaxBytes
}

// Dir is a directory of blocks of any number of scopes, with one size
// bound over them all.
type Dir struct {
	path string
	max  int64

	mu    sync.Mutex
	index map[fileKey]*list.Element // of *entry
	lru   list.List                 // most recently used first
	stats Stats
}

type fileKey struct{ scope, block uint64 }

type entry struct {
	key  fileKey
	size int64
}

// Open opens (creating it if need be) the directory at path: it indexes
// the block files there by name, size and modification time, without
// reading them, removes temporary files a killed writer left, and
// deletes the least recently used blocks past opts.MaxBytes.
func Open(path string, opts Options) (*Dir, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("prompt cache: %w", err)
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("prompt cache: %w", err)
	}
	d := &Dir{path: path, max: opts.MaxBytes, index: make(map[fileKey]*list.Element)}
	type found struct {
		entry
		mtime time.Time
	}
	var files []found
	for _, de := range ents {
		name := de.Name()
		if strings.HasPrefix(name, tempPrefix) {
			os.Remove(filepath.Join(path, name))
			continue
		}
		k, ok := parseName(name)
		if !ok || !de.Type().IsRegular() {
			continue // not ours: leave it alone
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		files = append(files, found{entry{k, info.Size()}, info.ModTime()})
	}
	slices.SortFunc(files, func(a, b found) int { return b.mtime.Compare(a.mtime) })
	for _, f := range files {
		d.index[f.key] = d.lru.PushBack(&entry{f.key, f.size})
		d.stats.Bytes += f.size
	}
	d.mu.Lock()
	d.shrink(0)
	d.mu.Unlock()
	return d, nil
}

// Path is the directory.
func (d *Dir) Path() string { return d.path }

// MaxBytes is the size bound in effect.
func (d *Dir) MaxBytes() int64 { return d.max }

// Stats returns the counters.
func (d *Dir) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Blocks = len(d.index)
	return s
}

// Scope is the blocks of one identity in a Dir: a model file and the
// layout of its blocks' bytes (element type, block size, shape, the
// runner's byte order), so that a block is only ever read back into a
// cache that lays its bytes out the same way.
type Scope struct {
	d        *Dir
	identity string
	key      uint64
}

// Scope returns the view of d for identity, which must name everything
// that makes two blocks' bytes interchangeable.
func (d *Dir) Scope(identity string) *Scope {
	h := fnv.New64a()
	h.Write([]byte(identity))
	return &Scope{d: d, identity: identity, key: h.Sum64()}
}

// Has reports whether the block with chain hash block is on disk (as far
// as the index knows: a read may still find it bad).
func (s *Scope) Has(block uint64) bool {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	_, ok := s.d.index[fileKey{s.key, block}]
	return ok
}

// Get reads the block with chain hash block into buf (grown if too small)
// and returns it, its Data aliasing buf, with buf. It fails with ErrMiss
// when the block is not on disk and with ErrCorrupt when its file was
// unusable, which it then deletes.
func (s *Scope) Get(block uint64, buf []byte) (Block, []byte, error) {
	d := s.d
	k := fileKey{s.key, block}
	d.mu.Lock()
	_, ok := d.index[k]
	d.mu.Unlock()
	if !ok {
		return Block{}, buf, ErrMiss
	}
	name := filepath.Join(d.path, k.name())
	buf, err := readFile(name, buf)
	if errors.Is(err, os.ErrNotExist) {
		d.drop(k, false)
		return Block{}, buf, ErrMiss
	}
	var b Block
	if err == nil {
		b, err = decode(buf, s.identity, block)
	}
	if err != nil {
		d.drop(k, true)
		return Block{}, buf, fmt.Errorf("%w %s: %v", ErrCorrupt, k.name(), err)
	}
	d.mu.Lock()
	if el, ok := d.index[k]; ok {
		d.lru.MoveToFront(el)
	}
	d.stats.Reads++
	d.mu.Unlock()
	// The modification time is the use recorded for the next Open.
	now := time.Now()
	os.Chtimes(name, now, now)
	return b, buf, nil
}

// Put writes the block with chain hash block, replacing any file of the
// same key, and deletes the least recently used blocks past the bound. A
// block larger than the bound is not written.
func (s *Scope) Put(block uint64, b Block) error {
	d := s.d
	k := fileKey{s.key, block}
	size := encodedSize(s.identity, b)
	if size > d.max {
		return fmt.Errorf("prompt cache: a block of %d bytes exceeds the bound of %d", size, d.max)
	}
	tmp, err := os.CreateTemp(d.path, tempPrefix+"*")
	if err != nil {
		return fmt.Errorf("prompt cache: %w", err)
	}
	err = encode(tmp, s.identity, block, b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("prompt cache: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.Rename(tmp.Name(), filepath.Join(d.path, k.name())); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("prompt cache: %w", err)
	}
	if el, ok := d.index[k]; ok {
		e := el.Value.(*entry)
		d.stats.Bytes -= e.size
		d.lru.Remove(el)
	}
	d.index[k] = d.lru.PushFront(&entry{k, size})
	d.stats.Bytes += size
	d.stats.Writes++
	d.shrink(1)
	return nil
}

// shrink deletes the least recently used blocks until the directory is
// within its bound, sparing the keep most recently used. d.mu is held.
func (d *Dir) shrink(keep int) {
	for d.stats.Bytes > d.max && d.lru.Len() > keep {
		e := d.lru.Back().Value.(*entry)
		d.remove(e.key)
		d.stats.Evicted++
	}
}

// drop deletes the file of k and its entry; bad counts it as refused.
func (d *Dir) drop(k fileKey, bad bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.remove(k)
	if bad {
		d.stats.Refused++
	}
}

// remove deletes the file of k and its entry. d.mu is held.
func (d *Dir) remove(k fileKey) {
	os.Remove(filepath.Join(d.path, k.name()))
	if el, ok := d.index[k]; ok {
		d.stats.Bytes -= el.Value.(*entry).size
		d.lru.Remove(el)
		delete(d.index, k)
	}
}

// The file format. All numbers are little-endian.
//
//	magic    8 bytes "rillkvb" and the version, 1
//	idLen    uint32: length of the identity
//	nTokens  uint32
//	dataLen  uint32
//	hash     uint64: the block's chain hash
//	parent   uint64: its parent's
//	identity idLen bytes
//	tokens   nTokens int32s
//	data     dataLen bytes
//	crc      uint32: CRC-32C (Castagnoli) of everything before it
const (
	magic      = "rillkvb\x01"
	headerSize = 8 + 4 + 4 + 4 + 8 + 8
	tempPrefix = ".tmp-"
	suffix     = ".kvb"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (k fileKey) name() string { return fmt.Sprintf("%016x-%016x%s", k.scope, k.block, suffix) }

func parseName(name string) (fileKey, bool) {
	var k fileKey
	if len(name) != 16+1+16+len(suffix) || !strings.HasSuffix(name, suffix) {
		return k, false
	}
	n, err := fmt.Sscanf(name[:33], "%016x-%016x", &k.scope, &k.block)
	return k, err == nil && n == 2 && k.name() == name
}

func encodedSize(identity string, b Block) int64 {
	return int64(headerSize + len(identity) + 4*len(b.Tokens) + len(b.Data) + 4)
}

func encode(w io.Writer, identity string, block uint64, b Block) error {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	var h [headerSize]byte
	copy(h[:], magic)
	binary.LittleEndian.PutUint32(h[8:], uint32(len(identity)))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(b.Tokens)))
	binary.LittleEndian.PutUint32(h[16:], uint32(len(b.Data)))
	binary.LittleEndian.PutUint64(h[20:], block)
	binary.LittleEndian.PutUint64(h[28:], b.Parent)
	bw.Write(h[:])
	bw.WriteString(identity)
	for _, t := range b.Tokens {
		bw.Write(binary.LittleEndian.AppendUint32(h[:0], uint32(t)))
	}
	bw.Write(b.Data)
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(binary.LittleEndian.AppendUint32(h[:0], crc.Sum32()))
	return err
}

// decode checks a whole file's bytes and returns the block, aliasing buf.
func decode(buf []byte, identity string, block uint64) (Block, error) {
	if len(buf) < headerSize+4 {
		return Block{}, fmt.Errorf("%d bytes, shorter than a header", len(buf))
	}
	body, sum := buf[:len(buf)-4], binary.LittleEndian.Uint32(buf[len(buf)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return Block{}, errors.New("checksum mismatch")
	}
	if string(body[:8]) != magic {
		return Block{}, errors.New("not a block file of this version")
	}
	idLen := int64(binary.LittleEndian.Uint32(body[8:]))
	nTok := int64(binary.LittleEndian.Uint32(body[12:]))
	dataLen := int64(binary.LittleEndian.Uint32(body[16:]))
	if headerSize+idLen+4*nTok+dataLen != int64(len(body)) {
		return Block{}, errors.New("lengths do not add up to the file's size")
	}
	rest := body[headerSize:]
	if string(rest[:idLen]) != identity {
		return Block{}, errors.New("the block belongs to another model or layout")
	}
	if h := binary.LittleEndian.Uint64(body[20:]); h != block {
		return Block{}, fmt.Errorf("the file holds block %016x", h)
	}
	rest = rest[idLen:]
	b := Block{Parent: binary.LittleEndian.Uint64(body[28:])}
	toks := rest[:4*nTok]
	b.Tokens = make([]int32, nTok)
	for i := range b.Tokens {
		b.Tokens[i] = int32(binary.LittleEndian.Uint32(toks[4*i:]))
	}
	b.Data = rest[4*nTok:]
	return b, nil
}

// readFile reads the file at name into buf, grown as needed.
func readFile(name string, buf []byte) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return buf, err
	}
	n := int(info.Size())
	buf = slices.Grow(buf[:0], n)[:n]
	_, err = io.ReadFull(f, buf)
	return buf, err
}
