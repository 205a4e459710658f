package llm

import (
	"context"
	"fmt"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// completeResponses makes one Responses API call. It is stateless: store is
// false and the whole conversation goes in the input, never a
// previous_response_id, so any call can be retried or replayed.
func (c *Client) completeResponses(ctx context.Context, req Request) (Response, error) {
	resp, err := c.response.New(ctx, responsesParams(req))
	if err != nil {
		return Response{}, c.translate(ctx, req.Model, err)
	}
	return c.responsesResponse(req.Model, resp)
}

func responsesParams(req Request) responses.ResponseNewParams {
	params := responses.ResponseNewParams{
		Model: req.Model,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responsesInput(req.Messages)},
		Tools: responsesTools(req.Tools),
		Store: openai.Bool(false),
	}
	if req.MaxOutputTokens > 0 {
		params.MaxOutputTokens = openai.Int(req.MaxOutputTokens)
	}
	return params
}

func responsesInput(msgs []Message) responses.ResponseInputParam {
	items := make(responses.ResponseInputParam, 0, len(msgs))
	for _, m := range msgs {
		switch m.Role {
		case RoleSystem:
			items = append(items, responses.ResponseInputItemParamOfMessage(m.Content, responses.EasyInputMessageRoleSystem))
		case RoleUser:
			items = append(items, responses.ResponseInputItemParamOfMessage(m.Content, responses.EasyInputMessageRoleUser))
		case RoleAssistant:
			// In this API an assistant turn is a message item followed by
			// one function_call item per tool call.
			if m.Content != "" || len(m.ToolCalls) == 0 {
				items = append(items, responses.ResponseInputItemParamOfMessage(m.Content, responses.EasyInputMessageRoleAssistant))
			}
			for _, tc := range m.ToolCalls {
				items = append(items, responses.ResponseInputItemParamOfFunctionCall(tc.Arguments, tc.ID, tc.Name))
			}
		case RoleTool:
			items = append(items, responses.ResponseInputItemUnionParam{
				OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
					CallID: openai.String(m.ToolCallID),
					Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String(m.Content)},
				},
			})
		}
	}
	return items
}

func responsesTools(tools []Tool) []responses.ToolUnionParam {
	if len(tools) == 0 {
		return nil
	}
	out := make([]responses.ToolUnionParam, 0, len(tools))
	for _, t := range tools {
		ft := &responses.FunctionToolParam{
			Name:       t.Name,
			Parameters: schemaOrEmpty(t.Parameters),
			// The Responses API makes function tools strict when this is
			// left out, and strict mode refuses schemas with optional
			// properties; tools here are described as in Chat Completions.
			Strict: openai.Bool(false),
		}
		if t.Description != "" {
			ft.Description = openai.String(t.Description)
		}
		out = append(out, responses.ToolUnionParam{OfFunction: ft})
	}
	return out
}

// schemaOrEmpty returns the schema of a tool without arguments as an empty
// object schema, which the Responses API requires.
func schemaOrEmpty(schema map[string]any) map[string]any {
	if schema != nil {
		return schema
	}
	return map[string]any{"type": "object", "properties": map[string]any{}}
}

func (c *Client) responsesResponse(model string, r *responses.Response) (Response, error) {
	if r == nil {
		return Response{}, fmt.Errorf("model endpoint answered with no response")
	}
	switch r.Status {
	case responses.ResponseStatusFailed:
		// Errors during generation come back as a 200 with status failed.
		e := &APIError{StatusCode: 200, Code: string(r.Error.Code), Type: r.Error.Type}
		// A context overflow found during generation is as final as one
		// found before it, and shortening the input fixes it the same way.
		e.contextLength = isContextLength(0, e.Code, e.Type, "")
		e.permanent = strings.HasPrefix(e.Code, "invalid_") || e.contextLength
		e.msg = fmt.Sprintf("model %q failed to answer", model)
		if e.Code != "" {
			e.msg += " (" + e.Code + ")"
		}
		e.msg += c.detail(r.Error.Message)
		return Response{}, e
	case responses.ResponseStatusCancelled, responses.ResponseStatusQueued, responses.ResponseStatusInProgress:
		return Response{}, fmt.Errorf("model endpoint answered with an unfinished response (status %s)", r.Status)
	}

	msg := Message{Role: RoleAssistant}
	var texts []string
	for _, item := range r.Output {
		switch item.Type {
		case "message":
			var b strings.Builder
			for _, part := range item.Content {
				switch part.Type {
				case "output_text":
					b.WriteString(part.Text)
				case "refusal":
					b.WriteString(part.Refusal)
				}
			}
			if b.Len() > 0 {
				texts = append(texts, b.String())
			}
		case "function_call":
			fc := item.AsFunctionCall()
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: fc.CallID, Name: fc.Name, Arguments: fc.Arguments})
		}
		// Reasoning items are dropped: with store=false they could only be
		// sent back encrypted, and the models answer well without them.
	}
	msg.Content = strings.Join(texts, "\n\n")

	finish := FinishStop
	switch {
	case r.Status == responses.ResponseStatusIncomplete && r.IncompleteDetails.Reason == "content_filter":
		finish = FinishContentFilter
	case r.Status == responses.ResponseStatusIncomplete:
		finish = FinishLength
	case len(msg.ToolCalls) > 0:
		finish = FinishToolCalls
	}
	u := r.Usage
	usage := Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.TotalTokens}
	if usage.TotalTokens == 0 {
		usage.TotalTokens = usage.InputTokens + usage.OutputTokens
	}
	return Response{Message: msg, Usage: usage, FinishReason: finish}, nil
}
