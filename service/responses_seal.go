package service

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"strings"
)

// Reasoning's encrypted_content. A client that keeps no state on the
// server (store false, as Codex sends) asks for include
// ["reasoning.encrypted_content"] and sends reasoning items back with only
// their id, summary and encrypted_content; rill must then read the
// reasoning out of it. It is the reasoning text sealed with AES-256-GCM
// under a key made when the process starts: opaque to the client, and
// refused when changed. Content sealed by another process (before a
// restart, by another replica behind a load balancer, or by OpenAI) does
// not open; its reasoning is then left out with a warning rather than
// refused, because the client could send the text in the clear anyway (a
// reasoning item's content), and most chat templates show no reasoning of
// earlier turns.

// sealPrefix marks rill's encrypted_content (format 1): OpenAI's start
// "gAAAA", so a foreign one is told apart before any decryption.
const sealPrefix = "rill1."

// sealLabel is the GCM additional data: a sealed box opens as reasoning
// only.
var sealLabel = []byte("rill responses reasoning")

// reasoningSealer seals and opens encrypted_content. It is safe for
// concurrent use.
type reasoningSealer struct{ aead cipher.AEAD }

// newReasoningSealer returns a sealer under key (32 bytes).
func newReasoningSealer(key []byte) *reasoningSealer {
	block, err := aes.NewCipher(key)
	if err != nil {
		panic("service: reasoning key: " + err.Error()) // a key of the wrong size: a programming error
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("service: reasoning key: " + err.Error())
	}
	return &reasoningSealer{aead: aead}
}

// processSealer seals under a random key of this process.
var processSealer = func() *reasoningSealer {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails
	return newReasoningSealer(key)
}()

// seal returns text as encrypted_content: the prefix, then base64 of a
// random nonce and the ciphertext with its tag.
func (s *reasoningSealer) seal(text string) string {
	n := s.aead.NonceSize()
	box := make([]byte, n, n+len(text)+s.aead.Overhead())
	_, _ = rand.Read(box) // crypto/rand.Read never fails
	box = s.aead.Seal(box, box[:n], []byte(text), sealLabel)
	return sealPrefix + base64.RawURLEncoding.EncodeToString(box)
}

// open returns the text sealed in content; ok is false for content this
// sealer did not make or that was changed since.
func (s *reasoningSealer) open(content string) (text string, ok bool) {
	rest, found := strings.CutPrefix(content, sealPrefix)
	if !found {
		return "", false
	}
	box, err := base64.RawURLEncoding.DecodeString(rest)
	n := s.aead.NonceSize()
	if err != nil || len(box) < n+s.aead.Overhead() {
		return "", false
	}
	plain, err := s.aead.Open(nil, box[:n], box[n:], sealLabel)
	if err != nil {
		return "", false
	}
	return string(plain), true
}
