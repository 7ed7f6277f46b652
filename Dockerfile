# syntax=docker/dockerfile:1
#
# The referral service as a container: compiled JavaScript on Node.js 24,
# production dependencies only, run as the unprivileged `node` user.
#
#   docker build -t referral-service .
#   docker run -p 8080:8080 -v referrals-data:/data referral-service
#
# NODE_IMAGE names the base of every stage (an official Node.js 24 image, or a
# mirror of it).
ARG NODE_IMAGE=node:24-slim

# Compiles the TypeScript sources (and the generated protobuf code) to dist/.
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig*.json ./
COPY gen ./gen
# The OpenAPI document, which src/transport/openapi.ts imports: the build puts
# it in dist/ beside the code that serves it.
COPY openapi ./openapi
COPY src ./src
RUN npm run build

# The production dependencies alone, installed from the lockfile.
FROM ${NODE_IMAGE} AS dependencies
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    DATA_DIR=/data
WORKDIR /app
COPY --from=dependencies /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# The dashboard's page, script and styles, which tsc does not copy: beside
# the compiled module, where src/transport/dashboard.ts looks first.
COPY --from=build /app/src/transport/dashboard ./dist/src/transport/dashboard
# Its "type": "module" makes Node load dist/ as ES modules, and its scripts
# run the admin CLI from dist/ (`docker exec <container> npm run admin -- list-apps`:
# with no src/ here, `preadmin` skips the build).
COPY package.json ./
# The embedded store (used when MONGODB_URI is unset) and its webhook key
# live in DATA_DIR, owned by the user the service runs as.
RUN mkdir -p /data && chown node:node /data
# The modules' compiled code, which each start writes and the next one loads
# (src/code-cache.ts): writable by that user too, or every start compiles.
RUN mkdir -p node_modules/.cache/referral-service \
 && chown node:node node_modules/.cache/referral-service
USER node
VOLUME ["/data"]
EXPOSE 8080
# Ready means the store answers (/readyz); slim images have no curl, so Node's
# fetch asks.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + process.env.PORT + '/readyz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# Node itself is PID 1 (no npm or shell in between), so SIGTERM reaches the
# service, which drains in-flight calls before it exits. The V8 flag is
# npm start's (see "Memory" in the README).
STOPSIGNAL SIGTERM
CMD ["node", "--max-semi-space-size=16", "dist/src/main.js"]
