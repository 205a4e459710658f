package llm

import (
	"context"
	"errors"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// Stream is Complete with the answer's text handed to onText as the
// endpoint streams it (stream: true), delta by delta, in order; the
// concatenation of the deltas is the returned message's Content (a
// refusal is not streamed). Tool calls and usage come whole in the
// Response, as from Complete. onText runs on the calling goroutine and
// should be quick: the stream waits for it.
//
// Errors are Complete's. A stream cut before its end is an error (a
// retryable one), even when some text was already handed to onText.
func (c *Client) Stream(ctx context.Context, req Request, onText func(string)) (Response, error) {
	if err := validate(req); err != nil {
		return Response{}, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, ErrTimeout)
	defer cancel()
	if onText == nil {
		onText = func(string) {}
	}
	if c.api == APIResponses {
		return c.streamResponses(ctx, req, onText)
	}
	return c.streamChat(ctx, req, onText)
}

// errCut says a stream ended without its last event.
var errCut = errors.New("the model endpoint's stream ended before the answer was complete")

func (c *Client) streamChat(ctx context.Context, req Request, onText func(string)) (Response, error) {
	params := chatParams(req)
	// Usage comes in a last chunk only when asked for.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.chat.NewStreaming(ctx, params)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	finished := false
	for stream.Next() {
		chunk := stream.Current()
		if !acc.AddChunk(chunk) {
			return Response{}, fmt.Errorf("the model endpoint streamed an inconsistent chunk (id %q)", chunk.ID)
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			if ch.Delta.Content != "" {
				onText(ch.Delta.Content)
			}
			if ch.FinishReason != "" {
				finished = true
			}
		}
	}
	if err := stream.Err(); err != nil {
		return Response{}, c.translate(ctx, req.Model, err)
	}
	if !finished {
		// A server that closes the connection cleanly mid-answer (no
		// finish_reason, no [DONE]) must not pass a cut answer as whole.
		if ctx.Err() != nil {
			return Response{}, c.translate(ctx, req.Model, ctx.Err())
		}
		return Response{}, errCut
	}
	return chatResponse(&acc.ChatCompletion)
}

func (c *Client) streamResponses(ctx context.Context, req Request, onText func(string)) (Response, error) {
	stream := c.response.NewStreaming(ctx, responsesParams(req))
	defer stream.Close()
	var final *responses.Response
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			if ev.Delta != "" {
				onText(ev.Delta)
			}
		case "response.completed", "response.incomplete", "response.failed":
			r := ev.Response
			final = &r
		case "error":
			e := ev.AsError()
			return Response{}, c.redact(fmt.Errorf("the model endpoint reported an error in its stream: %s (%s)", e.Message, e.Code))
		}
	}
	if err := stream.Err(); err != nil {
		return Response{}, c.translate(ctx, req.Model, err)
	}
	if final == nil {
		if ctx.Err() != nil {
			return Response{}, c.translate(ctx, req.Model, ctx.Err())
		}
		return Response{}, errCut
	}
	return c.responsesResponse(req.Model, final)
}
