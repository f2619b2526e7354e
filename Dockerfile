# syntax=docker/dockerfile:1

# Both stages on Debian 12: a venv built with one Python minor version does
# not import on another, and the distroless runtime is Debian 12 (Python 3.11).
FROM debian:12-slim AS build
RUN --mount=type=cache,target=/var/lib/apt/lists \
    apt-get update && apt-get install -y --no-install-recommends python3-venv
ENV PYTHONDONTWRITEBYTECODE=true
COPY . /src
WORKDIR /src
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /venv/build && /venv/build/bin/pip install hatch && \
    /venv/build/bin/hatch build -t wheel /whl && \
    python3 -m venv /venv/fn && /venv/fn/bin/pip install /whl/*.whl

FROM gcr.io/distroless/python3-debian12 AS image
COPY --from=build /venv/fn /venv/fn
EXPOSE 9443
USER nonroot:nonroot
ENTRYPOINT ["/venv/fn/bin/function"]
