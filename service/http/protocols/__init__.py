"""Other tools' protocols over the same retrieval and workflow: OpenAI chat completions
(`openai_chat`), Dify's External Knowledge API (`dify`) and MCP (`mcp_server`)."""
