# outboxd container. The build stage compiles the release binary (only it, no tests; the build
# context holds only what that needs, see .dockerignore) and strips it. The runtime stage holds
# the shared libraries it needs and curl for the health check, and runs it as a non-root user.
# Both stages install packages through scripts/install-deps.sh, like run.sh and test.sh.
FROM debian:bookworm AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh --build && rm -rf /var/lib/apt/lists/*
COPY . .
RUN rm -rf build && cmake --preset release -DOUTBOXD_TESTS=OFF >/dev/null \
 && cmake --build --preset release --target outboxd -j"$(nproc)" \
 && strip --strip-unneeded build/release/outboxd

FROM debian:bookworm-slim AS runtime
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /tmp/install-deps.sh \
 && groupadd --gid 10001 outboxd \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin outboxd
COPY --from=build /src/build/release/outboxd /usr/local/bin/outboxd
COPY conf/application.json /etc/outboxd/application.json
# Set by the build (`--build-arg VERSION=$(...)`); the defaults say the build did not.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="outboxd" \
      org.opencontainers.image.description="Transactional outbox, result table and saga compensation on PostgreSQL" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}"
USER 10001:10001
# The container listens on every interface, so it refuses to start without tokens: set
# OUTBOXD_AUTH_TOKENS (a JSON list of {name, role, sha256}), or OUTBOXD_AUTH_ALLOWANONYMOUS=true
# on a network you trust. docs/deployment.md lists the variables a container takes.
ENV OUTBOXD_SERVER_HOST=0.0.0.0 OUTBOXD_SERVER_PORT=9000
EXPOSE 9000
# SIGTERM (what `docker stop` and Kubernetes send) makes outboxd hand its claims back and exit 0
# within outbox.shutdownTimeout (10 s by default): give `docker stop -t` / the grace period more.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${OUTBOXD_SERVER_PORT}/healthz" >/dev/null || exit 1
ENTRYPOINT ["outboxd"]
CMD ["serve", "--config", "/etc/outboxd/application.json"]
