package llm

import (
	"context"
	"errors"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

// completeChat makes one Chat Completions call.
func (c *Client) completeChat(ctx context.Context, req Request) (Response, error) {
	completion, err := c.chat.New(ctx, chatParams(req))
	if err != nil {
		return Response{}, c.translate(ctx, req.Model, err)
	}
	return chatResponse(completion)
}

func chatParams(req Request) openai.ChatCompletionNewParams {
	params := openai.ChatCompletionNewParams{
		Model:    req.Model,
		Messages: chatMessages(req.Messages),
		Tools:    chatTools(req.Tools),
	}
	if req.MaxOutputTokens > 0 {
		// max_tokens is deprecated and refused by OpenAI's reasoning
		// models; Ollama, vLLM and LiteLLM accept max_completion_tokens.
		params.MaxCompletionTokens = openai.Int(req.MaxOutputTokens)
	}
	return params
}

func chatMessages(msgs []Message) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs))
	for _, m := range msgs {
		switch m.Role {
		case RoleSystem:
			out = append(out, openai.SystemMessage(m.Content))
		case RoleUser:
			out = append(out, openai.UserMessage(m.Content))
		case RoleTool:
			out = append(out, openai.ToolMessage(m.Content, m.ToolCallID))
		case RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			// Content may be absent only when there are tool calls.
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      tc.Name,
							Arguments: tc.Arguments,
						},
					},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	return out
}

func chatTools(tools []Tool) []openai.ChatCompletionToolUnionParam {
	if len(tools) == 0 {
		return nil
	}
	out := make([]openai.ChatCompletionToolUnionParam, 0, len(tools))
	for _, t := range tools {
		def := shared.FunctionDefinitionParam{
			Name:       t.Name,
			Parameters: shared.FunctionParameters(schemaOrEmpty(t.Parameters)),
		}
		if t.Description != "" {
			def.Description = openai.String(t.Description)
		}
		out = append(out, openai.ChatCompletionToolUnionParam{
			OfFunction: &openai.ChatCompletionFunctionToolParam{Function: def},
		})
	}
	return out
}

func chatResponse(completion *openai.ChatCompletion) (Response, error) {
	if completion == nil || len(completion.Choices) == 0 {
		return Response{}, errors.New("model endpoint answered with no choices")
	}
	choice := completion.Choices[0]
	msg := Message{Role: RoleAssistant, Content: choice.Message.Content}
	if msg.Content == "" && choice.Message.Refusal != "" {
		msg.Content = choice.Message.Refusal
	}
	for _, tc := range choice.Message.ToolCalls {
		// Only function tools are offered; a custom tool call cannot
		// happen, and would have no tool to run.
		if tc.Type != "function" && tc.Type != "" {
			continue
		}
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{
			ID:        tc.ID,
			Name:      tc.Function.Name,
			Arguments: tc.Function.Arguments,
		})
	}
	finish := choice.FinishReason
	if finish == "" {
		// Some compatible servers leave it out.
		finish = FinishStop
		if len(msg.ToolCalls) > 0 {
			finish = FinishToolCalls
		}
	}
	u := completion.Usage
	usage := Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	if usage.TotalTokens == 0 {
		usage.TotalTokens = usage.InputTokens + usage.OutputTokens
	}
	return Response{Message: msg, Usage: usage, FinishReason: finish}, nil
}
