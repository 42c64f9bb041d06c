package perfsift.registry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.List;
import javax.enterprise.inject.Produces;
import javax.inject.Singleton;

/** Stands in for the bean that Apicurio's config-index build extension would generate. */
public class DynamicConfigIndex {
  @Produces
  @Singleton
  DynamicConfigPropertyList dynamicConfigProperties() {
    return new DynamicConfigPropertyList(List.of());
  }
}
