# The stream worker image: `docker compose up` builds it; `stallwatch worker` is its command.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stallwatch ./stallwatch
COPY streams ./streams
RUN pip install --no-cache-dir '.[worker]' \
    && mkdir -p /var/lib/stallwatch && chown nobody /var/lib/stallwatch
# Faust keeps a data directory in the working directory: one the worker's user may write.
WORKDIR /var/lib/stallwatch
USER nobody
EXPOSE 6066 9400
CMD ["stallwatch", "worker"]
