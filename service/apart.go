package service

import (
	"fmt"
	"runtime/debug"
)

// apart runs f on a goroutine of its own and returns what it returned, or
// panics with its panic (and its stack). A request's start (the OpenAPI
// validator, the chat template, the tokenizer) grows a goroutine's stack
// to tens of KB, and a goroutine keeps a grown stack until the collector
// halves it, at best: the goroutine that then waits for the engine for as
// long as a stream lasts keeps its stack small when the start ran apart.
// It costs a goroutine's start and a channel, about a microsecond.
func apart[A, B any](f func() (A, B)) (A, B) {
	type result struct {
		a     A
		b     B
		panic any
		stack []byte
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if v := recover(); v != nil {
				r = result{panic: v, stack: debug.Stack()}
			}
			done <- r
		}()
		r.a, r.b = f()
	}()
	r := <-done
	if r.panic != nil {
		panic(fmt.Sprintf("%v\n[on the goroutine that ran it apart]\n%s", r.panic, r.stack))
	}
	return r.a, r.b
}
