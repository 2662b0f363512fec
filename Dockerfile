# outboxd container: build stage compiles the release binary, runtime stage runs it as a
# non-root user. Both install packages through scripts/install-deps.sh, like run.sh and test.sh.
FROM debian:bookworm AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh --build && rm -rf /var/lib/apt/lists/*
COPY . .
RUN rm -rf build && cmake --preset release && cmake --build --preset release -j"$(nproc)"

FROM debian:bookworm-slim AS runtime
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin outboxd
COPY --from=build /src/build/release/outboxd /usr/local/bin/outboxd
COPY conf/application.json /etc/outboxd/application.json
USER outboxd
# The container listens on every interface, so it refuses to start without tokens: set
# OUTBOXD_AUTH_TOKENS (a JSON list of {name, role, sha256}), or OUTBOXD_AUTH_ALLOWANONYMOUS=true
# on a network you trust. The README's "Security" section shows how to make a token.
ENV OUTBOXD_SERVER_HOST=0.0.0.0 OUTBOXD_SERVER_PORT=9000
EXPOSE 9000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${OUTBOXD_SERVER_PORT}/healthz" >/dev/null || exit 1
ENTRYPOINT ["outboxd"]
CMD ["serve", "--config", "/etc/outboxd/application.json"]
