"""Framework adapters: each module (`stallwatch.adapters.langchain`, ...) imports only its framework."""
