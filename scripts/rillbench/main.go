// Command rillbench measures rill's native engine as llama.cpp's llama-bench
// does, for a same-run comparison (scripts/bench-peer.sh): prompt processing
// of -p tokens in forward passes of -ub tokens (512, llama-bench's default
// and rill serve's --batch-tokens; -ub 0: one pass) and generation of -n
// tokens one at a time, each
// after -d tokens already in the cache (a fresh cache per repetition), with
// a warm-up run first; it prints one JSON object per test with the mean and
// sample standard deviation of tokens/s over -r repetitions.
//
//	go run ./scripts/rillbench -model m.gguf -t 2 -p 494 -n 128 -d 0 -r 3
//	go run ./scripts/rillbench -bandwidth -t 2    # read bandwidth, GB/s
//	go run ./scripts/rillbench -model m.gguf -weights  # parameters and bytes, total and active
//	go run ./scripts/rillbench ... -cpuprofile cpu.out  # where the time goes
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"rill/engine/backend/cpu"
	"rill/engine/model"
)

type result struct {
	Model    string  `json:"model"`
	Test     string  `json:"test"`
	Threads  int     `json:"threads"`
	Depth    int     `json:"n_depth"`
	AvgTS    float64 `json:"avg_ts"`
	StddevTS float64 `json:"stddev_ts"`
	// CPUTS is the best repetition's tokens per second of the process's
	// CPU time, times the threads: the rate had its threads never waited
	// for a core. On a shared machine it moves far less with the load
	// than AvgTS, though a pool spinning at its barriers counts as work.
	CPUTS   float64 `json:"cpu_ts"`
	Kernels string  `json:"kernels"`
	UBatch  int     `json:"n_ubatch,omitempty"` // the pp test's tokens per forward pass
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	path := flag.String("model", "", "GGUF model")
	threads := flag.Int("t", 2, "threads")
	pp := flag.Int("p", 512, "prompt tokens (0: none)")
	tg := flag.Int("n", 128, "generated tokens (0: none)")
	depth := flag.Int("d", 0, "tokens in the cache before each test")
	reps := flag.Int("r", 3, "repetitions")
	ubatch := flag.Int("ub", 512, "tokens of one forward pass of the pp test (0: the whole prompt in one), as llama-bench's -ub and rill serve's --batch-tokens")
	bandwidth := flag.Bool("bandwidth", false, "measure read bandwidth instead (GB/s)")
	weights := flag.Bool("weights", false, "print the model's parameters and weight bytes, total and active per token, instead")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the measured runs to this file")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "rillbench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *bandwidth {
		fmt.Printf("{\"test\":\"read\",\"threads\":%d,\"gb_s\":%.2f}\n", *threads, readBandwidth(*threads))
		return
	}
	if *weights {
		if err := printWeights(*path); err != nil {
			fmt.Fprintln(os.Stderr, "rillbench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*path, *threads, *pp, *tg, *depth, *reps, *ubatch); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "rillbench:", err)
		os.Exit(1)
	}
}

func run(path string, threads, pp, tg, depth, reps, ubatch int) error {
	m, err := model.Open(path)
	if err != nil {
		return err
	}
	defer m.Close()
	be := cpu.New(cpu.Options{Threads: threads})
	defer be.Close()
	ctx := depth + max(pp, tg) + 16
	table := make([]int32, (ctx+15)/16)
	for i := range table {
		table[i] = int32(i)
	}
	if ubatch <= 0 || ubatch > pp {
		ubatch = pp
	}
	batch := max(ubatch, min(depth, 512), 1)
	r := model.NewRunner(m, be, batch)
	var b model.Batch
	// forward feeds n tokens at positions pos.. (token ids cycle through
	// the vocabulary's low ids, as llama-bench feeds random ones).
	forward := func(kv *model.KV, pos, n, prompt int) error {
		b.Reset()
		b.Tables = append(b.Tables, table)
		// The cache's first depth tokens and the pp test are prompts; the
		// tg tests' tokens are generated.
		b.Prompt = append(b.Prompt, int32(prompt))
		for i := range n {
			b.Tokens = append(b.Tokens, int32(1+(pos+i)*7%250))
			b.Pos = append(b.Pos, int32(pos+i))
			b.Seq = append(b.Seq, 0)
		}
		b.Logits = append(b.Logits, int32(n-1))
		_, err := r.Forward(&b, kv)
		return err
	}
	measure := func(test string, n int, body func(kv *model.KV) error) error {
		var rates []float64
		var cpuRate float64
		for rep := -1; rep < reps; rep++ { // rep -1: warm-up
			kv, err := model.NewKV(&m.Config, model.KVF16, len(table), 16)
			if err != nil {
				return err
			}
			for pos := 0; pos < depth; pos += batch {
				if err := forward(kv, pos, min(batch, depth-pos), depth); err != nil {
					return err
				}
			}
			start, cpu0 := time.Now(), processCPU()
			if err := body(kv); err != nil {
				return err
			}
			if rep >= 0 {
				rates = append(rates, float64(n)/time.Since(start).Seconds())
				cpuRate = max(cpuRate, float64(n)*float64(be.Threads())/(processCPU()-cpu0).Seconds())
			}
		}
		mean, sd := stats(rates)
		res := result{Model: path, Test: test, Threads: be.Threads(), Depth: depth, AvgTS: mean, StddevTS: sd, CPUTS: cpuRate, Kernels: be.Kernels()}
		if test != fmt.Sprintf("tg%d", tg) {
			res.UBatch = ubatch
		}
		out, _ := json.Marshal(res)
		fmt.Println(string(out))
		return nil
	}
	if pp > 0 {
		err := measure(fmt.Sprintf("pp%d", pp), pp, func(kv *model.KV) error {
			// Forward passes of ubatch tokens, as rill serve's chunked
			// prefill (--batch-tokens) and llama-bench (-ub) feed a prompt.
			for pos := 0; pos < pp; pos += ubatch {
				if err := forward(kv, depth+pos, min(ubatch, pp-pos), depth+pp); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if tg > 0 {
		err := measure(fmt.Sprintf("tg%d", tg), tg, func(kv *model.KV) error {
			for i := range tg {
				if err := forward(kv, depth+i, 1, depth); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func stats(v []float64) (mean, sd float64) {
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	if len(v) > 1 {
		for _, x := range v {
			sd += (x - mean) * (x - mean)
		}
		sd = math.Sqrt(sd / float64(len(v)-1))
	}
	return mean, sd
}

// readBandwidth reads a 1 GiB buffer (far larger than any cache) with the
// SIMD dot kernel on the given number of goroutines, 10 times, and returns
// the best rate in GB/s: the memory-bandwidth bound of a decode step (the
// best of several, as other processes on a shared machine only lower it).
func readBandwidth(threads int) float64 {
	const n = 1 << 28 // float32s: 1 GiB
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = 1
	}
	best := 0.0
	for range 10 {
		var wg sync.WaitGroup
		start := time.Now()
		per := n / threads
		for t := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				part := buf[t*per : (t+1)*per]
				_ = cpu.DotF32(part, part)
			}()
		}
		wg.Wait()
		best = max(best, 4*float64(n)/time.Since(start).Seconds()/1e9)
	}
	return best
}

// printWeights prints the parameters and weight bytes of the model at
// path, in all and those one token computes with (fewer in a mixture of
// experts): decode's bandwidth bound is the active bytes per token.
func printWeights(path string) error {
	m, err := model.Open(path)
	if err != nil {
		return err
	}
	defer m.Close()
	params, active := m.Params()
	bytes, activeBytes := m.WeightBytes()
	fmt.Printf("{\"test\":\"weights\",\"params\":%d,\"active_params\":%d,\"bytes\":%d,\"active_bytes\":%d}\n", params, active, bytes, activeBytes)
	return nil
}
