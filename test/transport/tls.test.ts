import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { fromBinary } from "@bufbuild/protobuf";
import { createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import test from "ava";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { loadConfig } from "../../src/config.js";
import {
  closeGrpcClient,
  grpcCall,
  type Json,
  keys,
  selfSignedCertificate,
  startServer,
  type TestServer,
} from "../helpers/server.js";
import { runService } from "../operations/service.js";

/**
 * TLS on the one port (TLS_CERT_FILE, TLS_KEY_FILE): ALPN offers h2 and
 * http/1.1, and every protocol is served on both, checked with a
 * throwaway self-signed certificate made here for localhost; a certificate
 * that does not load stops the start in one line naming its variable.
 */

const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), "referrals-tls-"));
let certFile = "";
let keyFile = "";
const otherKeyFile = join(dir, "other-key.pem");
let server: TestServer | undefined;
let ca: Buffer;
const sessions: Http2SessionManager[] = [];

test.before(async () => {
  ({ certFile, keyFile } = selfSignedCertificate(dir));
  await run("openssl", [
    "genpkey",
    "-algorithm",
    "EC",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-out",
    otherKeyFile,
  ]);
  ca = readFileSync(certFile);
  server = await startServer({ env: { TLS_CERT_FILE: certFile, TLS_KEY_FILE: keyFile } });
});

test.after.always(async () => {
  for (const session of sessions) session.abort();
  if (server) closeGrpcClient(server);
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function started(): TestServer {
  if (!server) throw new Error("the TLS server did not start");
  return server;
}

const httpsUrl = () => `https://localhost:${started().port}`;

/** The campaign ids REST answers, with curl over TLS on the given HTTP version. */
async function curlCampaigns(version: "1.1" | "2"): Promise<{ version: string; ids: string[] }> {
  const { stdout } = await run("curl", [
    "-s",
    "--cacert",
    certFile,
    version === "2" ? "--http2" : "--http1.1",
    "-H",
    `authorization: ${keys.public}`,
    "-w",
    "\n%{http_version}",
    `${httpsUrl()}/campaigns`,
  ]);
  const end = stdout.lastIndexOf("\n");
  const campaigns = JSON.parse(stdout.slice(0, end)) as Json[];
  return { version: stdout.slice(end + 1), ids: campaigns.map((campaign) => campaign.id) };
}

const withKey: Interceptor = (next) => (request) => {
  request.header.set("authorization", keys.public);
  return next(request);
};

function transportOf(
  kind: "connect" | "connect-binary" | "grpc-web",
  version: "1.1" | "2",
): Transport {
  const http =
    version === "2"
      ? (() => {
          const sessionManager = new Http2SessionManager(httpsUrl(), {}, { ca });
          sessions.push(sessionManager);
          return { httpVersion: "2" as const, sessionManager };
        })()
      : { httpVersion: "1.1" as const, nodeOptions: { ca } };
  const options = {
    baseUrl: httpsUrl(),
    ...http,
    interceptors: [withKey],
    useBinaryFormat: kind !== "connect",
  };
  return kind === "grpc-web" ? createGrpcWebTransport(options) : createConnectTransport(options);
}

test.serial(
  "every protocol is served over TLS, on HTTP/1.1 and HTTP/2 as ALPN chooses",
  async (t) => {
    const overHttp1 = await curlCampaigns("1.1");
    const overHttp2 = await curlCampaigns("2");
    t.is(overHttp1.version, "1.1");
    t.is(overHttp2.version, "2", "ALPN offered h2");
    t.true(overHttp1.ids.length > 0);
    t.deepEqual(overHttp2.ids, overHttp1.ids);

    for (const kind of ["connect", "connect-binary", "grpc-web"] as const) {
      for (const version of ["1.1", "2"] as const) {
        const response = await createClient(
          CampaignsService,
          transportOf(kind, version),
        ).listCampaigns({});
        t.deepEqual(
          response.campaigns.map((campaign) => campaign.id),
          overHttp1.ids,
          `${kind} over HTTP/${version}`,
        );
      }
    }

    const client = new grpc.Client(`localhost:${started().port}`, grpc.credentials.createSsl(ca));
    try {
      const ids = await new Promise<string[]>((resolve, reject) => {
        const method = CampaignsService.method.listCampaigns;
        const metadata = new grpc.Metadata();
        metadata.set("authorization", keys.public);
        client.makeUnaryRequest(
          `/${CampaignsService.typeName}/ListCampaigns`,
          (value: Buffer) => value,
          (bytes: Buffer) => bytes,
          Buffer.alloc(0),
          metadata,
          (error, bytes) => {
            if (error || !bytes) return reject(error);
            resolve(fromBinary(method.output, bytes).campaigns.map((campaign) => campaign.id));
          },
        );
      });
      t.deepEqual(ids, overHttp1.ids, "gRPC over TLS");
    } finally {
      client.close();
    }

    const { stdout } = await run("curl", [
      "-s",
      "--cacert",
      certFile,
      "--http2",
      `${httpsUrl()}/healthz`,
    ]);
    t.is(stdout, '{"status":"ok"}');
  },
);

test.serial("the TLS port speaks no cleartext", async (t) => {
  // A cleartext gRPC client is refused rather than answered in the clear.
  const outcome = await grpcCall(started(), CampaignsService.method.listCampaigns, {}, keys.public);
  t.false(outcome.ok);
  const failed = await run("curl", [
    "-s",
    "-o",
    "/dev/null",
    "-w",
    "%{http_code}",
    `http://localhost:${started().port}/healthz`,
  ]).catch((error: { stdout: string }) => error);
  t.not(failed.stdout, "200");
});

test("a certificate or key that does not load is refused naming its variable", (t) => {
  const garbage = join(dir, "garbage.pem");
  writeFileSync(garbage, "not a certificate\n");
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ TLS_CERT_FILE: certFile }, /^TLS_KEY_FILE is required with TLS_CERT_FILE/],
    [{ TLS_KEY_FILE: keyFile }, /^TLS_CERT_FILE is required with TLS_KEY_FILE/],
    [
      { TLS_CERT_FILE: join(dir, "missing.pem"), TLS_KEY_FILE: keyFile },
      /^TLS_CERT_FILE: cannot read .*missing\.pem \(ENOENT\)$/,
    ],
    [
      { TLS_CERT_FILE: garbage, TLS_KEY_FILE: keyFile },
      /^TLS_CERT_FILE: .*garbage\.pem holds no PEM certificate/,
    ],
    [
      { TLS_CERT_FILE: certFile, TLS_KEY_FILE: garbage },
      /^TLS_KEY_FILE: .*garbage\.pem holds no unencrypted PEM private key/,
    ],
    [
      { TLS_CERT_FILE: certFile, TLS_KEY_FILE: otherKeyFile },
      /^TLS_KEY_FILE: .*other-key\.pem is not the key of the certificate in TLS_CERT_FILE/,
    ],
  ];
  for (const [env, message] of cases)
    t.throws(() => loadConfig(env), { message }, JSON.stringify(env));
  t.truthy(loadConfig({ TLS_CERT_FILE: certFile, TLS_KEY_FILE: keyFile }).tls);
});

test("a start with a key that does not match its certificate is one line on stderr", async (t) => {
  const exited = await runService({
    PORT: "0",
    HOST: "127.0.0.1",
    DATA_DIR: join(dir, "data"),
    TLS_CERT_FILE: certFile,
    TLS_KEY_FILE: otherKeyFile,
  });
  t.is(exited.code, 1);
  t.is(exited.stdout, "");
  t.regex(
    exited.stderr,
    /^referral-service: TLS_KEY_FILE: .* is not the key of the certificate in TLS_CERT_FILE[^\n]*\n$/,
  );
});

test("the banner of a start with TLS gives https commands", async (t) => {
  const started = await runService({
    PORT: "0",
    HOST: "127.0.0.1",
    DATA_DIR: join(dir, "banner-data"),
    TLS_CERT_FILE: certFile,
    TLS_KEY_FILE: keyFile,
  });
  t.regex(started.stdout, /listening on 127\.0\.0\.1:\d+ over TLS/);
  t.regex(started.stdout, /curl -s https:\/\/127\.0\.0\.1:\d+\/campaigns/);
  t.notRegex(started.stdout, /http:\/\//, "no cleartext URL is suggested");
});
