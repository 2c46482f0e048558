"""The model side of the service: an OpenAI-compatible client with each endpoint's habits
(`client`), structured output whatever the endpoint accepts (`structured`), reasoning in any of
its forms (`reasoning`), and the `check` report of `python -m service.llm check`."""
