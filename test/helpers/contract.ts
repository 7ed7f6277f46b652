import { readdirSync } from "node:fs";
import type { DescFile, DescService } from "@bufbuild/protobuf";

/**
 * Every service of the contract, read from the generated files rather than
 * listed, so a service or RPC added to the contract is covered by the suites
 * that walk it. In file-name order, then declaration order.
 */
export async function contractServices(): Promise<DescService[]> {
  const services: DescService[] = [];
  for (const name of readdirSync(new URL("../../gen/referral/v1/", import.meta.url)).sort()) {
    if (!name.endsWith("_pb.ts")) continue;
    const module = await import(`../../gen/referral/v1/${name.replace(/\.ts$/, ".js")}`);
    for (const value of Object.values(module) as Array<Partial<DescFile>>) {
      if (value.kind === "file") services.push(...(value.services ?? []));
    }
  }
  return services;
}
