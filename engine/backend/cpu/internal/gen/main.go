// Command gen writes engine/backend/cpu's generated assembly with avo: one
// generator per kernel family, parameterised by weight type and tile shape.
//
//	go generate ./engine/backend/cpu   (runs: go run ./internal/gen -out ... -stubs ...)
//
// With -kernels softmax it writes engine/sample's softmax kernels instead
// (go generate ./engine/sample), from the same vector code, so that the
// sampler computes its probabilities without importing the CPU backend.
//
// The .s files and their Go declarations are committed; CI regenerates them
// and fails when they differ (.ci/run), so the generator is the source of
// truth.
package main

import (
	"flag"
	"log"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/buildtags"
	"github.com/mmcloughlin/avo/ir"
	"github.com/mmcloughlin/avo/operand"

	. "github.com/mmcloughlin/avo/build"
)

func main() {
	kernels := flag.String("kernels", "cpu", "the kernels to write: cpu (engine/backend/cpu) or softmax (engine/sample)")
	flag.Parse()
	Constraint(buildtags.Term("amd64"))
	switch *kernels {
	case "cpu":
		cpuKernels()
	case "softmax":
		softmaxFamily("")
	default:
		log.Fatalf("-kernels %q: want cpu or softmax", *kernels)
	}
	Generate()
}

// cpuKernels are engine/backend/cpu's.
func cpuKernels() {
	gemm32()
	packed32Family()
	packedKFamily()
	packedFFamily()
	packedDFamily()
	roundBF16Z()
	gemmK()
	gemmF()
	kquantFamily()
	block32Family()
	attnZ()
	attnScoresZ()
	attnFamily()
	attnTFamily()
	attnTBFamily()
	attnQFamily()
	attnQScores()
	floatFamily("")
	q32zFamily("")
	vecFamily("")
	q8p()
}

// raw emits an instruction avo's database lacks (AVX-512 VNNI). The
// operands are in Go assembler order (sources first, destination last).
func raw(opcode string, ops ...operand.Op) {
	Instruction(&ir.Instruction{Opcode: opcode, Operands: ops})
}

// text starts a kernel: TEXT, with go:noescape on its Go declaration (no
// kernel keeps a pointer it is given, and without the pragma every slice
// passed to one would escape to the heap).
func text(name string, a attr.Attribute, signature string) {
	TEXT(name, a, signature)
	Pragma("noescape")
}

// textNoEscape is text, for files that shadow it.
func textNoEscape(name string, a attr.Attribute, signature string) { text(name, a, signature) }
