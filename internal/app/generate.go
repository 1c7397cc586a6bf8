package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"rill/config"
	"rill/engine"
)

// Generate runs `rill generate` with its command-line arguments args: one
// prompt through the native engine, printing the continuation to stdout as
// it streams and then prompt and decode speed to stderr. It returns
// flag.ErrHelp after printing the usage for -h.
func Generate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	flagModel := config.Model{Native: &config.Native{}}
	flagModel.RegisterNativeFlags(fs)
	prompt := fs.String("prompt", "Once upon a time", "prompt text")
	n := fs.Int("n", 64, "tokens to generate")
	temp := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	seed := fs.Int64("seed", -1, "sampling seed (-1: random)")
	ignoreEOS := fs.Bool("ignore-eos", false, "keep generating past the end-of-sequence token")
	prediction := fs.String("prediction", "", "predicted output, used as a draft (OpenAI Predicted Outputs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e, err := openFlags(ctx, &flagModel, log)
	if err != nil {
		return err
	}
	runCtx, stopEngine := context.WithCancel(context.Background())
	waitEngine := e.Run(runCtx, log)
	defer func() {
		stopEngine()
		waitEngine()
		e.Close()
	}()

	req := &engine.Request{
		Model:      e.Models()[0].ID,
		Prompt:     *prompt,
		MaxTokens:  *n,
		IgnoreEOS:  *ignoreEOS,
		Prediction: *prediction,
		Sampling:   engine.Sampling{Temperature: *temp},
	}
	if *seed >= 0 {
		req.Sampling.Seed = seed
	}
	st, err := e.Generate(ctx, req)
	if err != nil {
		return err
	}
	fmt.Print(*prompt)
	var stats *engine.Stats
	for {
		ev, err := engine.Recv(st)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		fmt.Print(ev.Text)
		if ev.Final {
			stats = ev.Stats
		}
	}
	fmt.Println()
	if stats != nil {
		fmt.Fprintf(os.Stderr, "prompt: %d tokens, %.1f tokens/s; decode: %d tokens, %.1f tokens/s\n",
			stats.PromptTokens, rate(stats.PromptTokens, stats.PromptTime.Seconds()),
			stats.CompletionTokens, rate(stats.CompletionTokens-1, stats.GenerationTime.Seconds()))
		if stats.DraftAccepted != nil {
			a, r := *stats.DraftAccepted, *stats.DraftRejected
			fmt.Fprintf(os.Stderr, "drafts: %d accepted, %d rejected (%.0f%% of proposed)\n", a, r, 100*rate(a, float64(a+r)))
		}
	}
	return nil
}

func rate(n int, secs float64) float64 {
	if secs <= 0 || n <= 0 {
		return 0
	}
	return float64(n) / secs
}
