# The stream worker image (the default target): `docker compose up` builds it; `stallwatch worker`
# is its command, `stallwatch fleet` the fleet app's.
# The sidecar for coding agents and runtimes in any language: `docker build --target serve .`
# (`stallwatch serve` on 0.0.0.0:8737, which needs STALLWATCH_SERVE_TOKEN set).
FROM python:3.11-slim AS source
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stallwatch ./stallwatch
COPY streams ./streams

FROM source AS serve
RUN pip install --no-cache-dir '.[serve]'
USER nobody
EXPOSE 8737
CMD ["stallwatch", "serve", "--host", "0.0.0.0"]

FROM source AS worker
# Both distributions from this tree: stallwatch-streams' requirement of stallwatch is met by `.`.
RUN pip install --no-cache-dir . ./streams
USER nobody
EXPOSE 9401 9400
CMD ["stallwatch", "worker"]
