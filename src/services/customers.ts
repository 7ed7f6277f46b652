import type { JsonObject } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { newId } from "../domain/ids.js";
import { limits } from "../domain/limits.js";
import type { Clock } from "../domain/tenancy.js";
import { customerIdentified } from "../events/events.js";
import { newCustomerMessage } from "../store/customer-records.js";
import { callerOf } from "./context.js";
import { invalidArgument, notFound } from "./errors.js";
import {
  environmentName,
  environmentOrProduction,
  optionalEmail,
  optionalText,
  pageOf,
  requiredText,
} from "./validate.js";

/** Creates the CustomersService implementation. */
export function createCustomersService(deps: {
  clock: Clock;
  notifyWebhooks: () => void;
}): ServiceImpl<typeof CustomersService> {
  const { clock } = deps;
  return {
    async identifyCustomer(request, context) {
      const { store } = callerOf(context);
      const input = {
        externalUserId: requiredText(request.externalUserId, "externalUserId"),
        name: requiredText(request.name, "name"),
        email: optionalEmail(request.email, "email"),
        environment: environmentOrProduction(request.environment),
        customProperties: request.customProperties
          ? checkedCustomProperties(request.customProperties)
          : undefined,
      };
      const at = clock();
      const id = newId("cus", at);
      const doc = await store.customers.identify(input, {
        newId: id,
        at,
        outbox: [customerIdentified(id, at)],
      });
      deps.notifyWebhooks();
      const [customer] =
        doc._id === id ? [newCustomerMessage(doc)] : await store.customers.messages([doc]);
      return { customer };
    },

    async getCustomer(request, context) {
      const { store } = callerOf(context);
      const id = requiredText(request.id, "id");
      const doc = await store.customers.find(id);
      if (!doc) throw notFound(`customer ${id}`);
      const [customer] = await store.customers.messages([doc]);
      return { customer };
    },

    async listCustomers(request, context) {
      const { store } = callerOf(context);
      const page = pageOf(request.limit, request.offset);
      const { total, docs } = await store.customers.findMany(
        {
          environment: environmentName(request.environment),
          externalUserId: optionalText(request.externalUserId, "externalUserId"),
          email: optionalText(request.email, "email", limits.email),
          referralCode: optionalText(request.referralCode, "referralCode"),
        },
        page,
      );
      return { total, ...page, data: await store.customers.messages(docs) };
    },
  };
}

/**
 * customProperties: at most 50 keys and 16 KiB serialized; keys may not
 * start with `$` or contain `.` (they become stored field paths).
 */
function checkedCustomProperties(properties: JsonObject): JsonObject {
  const keys = Object.keys(properties);
  if (keys.length > limits.customPropertyKeys) {
    throw invalidArgument(
      "customProperties",
      `must have at most ${limits.customPropertyKeys} keys`,
    );
  }
  for (const key of keys) {
    if (key === "" || key.startsWith("$") || key.includes(".")) {
      throw invalidArgument(
        `customProperties.${key}`,
        "key must be non-empty, not start with '$' and not contain '.'",
      );
    }
  }
  if (Buffer.byteLength(JSON.stringify(properties)) > limits.customPropertiesBytes) {
    throw invalidArgument(
      "customProperties",
      `must be at most ${limits.customPropertiesBytes} bytes serialized`,
    );
  }
  return properties;
}
